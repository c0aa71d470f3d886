#include <iostream>

#include "actors/engine.hpp"
#include "actors/llm.hpp"

int main() {
  troupe::LLM llm(troupe::EngineArgs{.model = troupe::default_model_dir(), .seed = 0});
  auto outs = llm.generate({"The future of AI is", "Once upon a time"},
                           troupe::SamplingParams{.temperature = 0.8, .top_p = 0.95});
  for (const auto& out : outs)
    std::cout << out.prompt << out.outputs[0].text << "\n  (" << out.outputs[0].finish_reason
              << ", " << out.outputs[0].token_ids.size() << " tokens)\n";
}
