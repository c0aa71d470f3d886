#include <exception>
#include <iostream>

#include "actors/llm.hpp"

int main() try {
  // .model = "" is the embedded model (troupe-fortunes); give a checkpoint directory for another.
  troupe::LLM llm(troupe::EngineArgs{.model = "", .seed = 0});
  auto outs = llm.generate({"The future of AI is", "Once upon a time"},
                           troupe::SamplingParams{.temperature = 0.8, .top_p = 0.95});
  for (const auto& out : outs)
    std::cout << out.prompt << out.outputs[0].text << "\n  (" << out.outputs[0].finish_reason
              << ", " << out.outputs[0].token_ids.size() << " tokens)\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "error: " << e.what() << "\n";
  return 1;
}
