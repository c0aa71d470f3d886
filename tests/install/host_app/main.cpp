// A host application that embeds troupe's engine in its own CAF actor system: it links the
// installed package (find_package(troupe), troupe::troupe), starts its own actor system, has
// troupe::Engine spawn the engine's actors in it, and sends the engine actor its typed
// messages, with an actor of its own receiving the outputs.
//
//   host_app [PROMPT]    prints "model: <dir>", then the prompt and 16 greedy tokens of it
#include <caf/all.hpp>

#include <chrono>
#include <exception>
#include <future>
#include <iostream>

#include "actors/engine.hpp"
#include "actors/messages.hpp"

int main(int argc, char** argv) try {
  caf::actor_system_config cfg;
  troupe::register_message_types(cfg);
  caf::actor_system sys{cfg};
  // No model given: the embedded one, found in the install this program was built against.
  troupe::Engine engine(sys, troupe::EngineArgs{.seed = 0, .disable_log_stats = true});
  std::cout << "model: " << engine.info().model_dir << std::endl;

  // The host's own actor receives the request's outputs.
  std::promise<troupe::RequestOutput> result;
  auto sink = sys.spawn([&result](caf::event_based_actor* self) -> caf::behavior {
    return {[=, &result](troupe::output_atom, troupe::RequestOutput& out) {
      if (!out.finished) return;
      result.set_value(std::move(out));
      self->quit();
    }};
  });
  troupe::EngineRequest request;
  request.prompt = argc > 1 ? argv[1] : "Once upon a time";
  request.params.max_tokens = 16;
  request.params.temperature = 0.0;
  std::string error;
  caf::scoped_actor self{sys};
  self->request(engine.handle(), std::chrono::seconds(30), troupe::submit_atom::value, request,
                caf::actor_cast<caf::actor>(sink))
      .receive([](const std::string&) {}, [&](caf::error& e) { error = troupe::error_text(e); });
  if (!error.empty()) throw std::runtime_error("submit: " + error);
  auto done = result.get_future();
  if (done.wait_for(std::chrono::seconds(120)) != std::future_status::ready)
    throw std::runtime_error("no output within 120 s");
  const troupe::RequestOutput out = done.get();
  if (!out.error.empty()) throw std::runtime_error(out.error);
  std::cout << out.prompt << out.outputs.at(0).text << "\n(" << out.outputs.at(0).token_ids.size()
            << " tokens, " << out.outputs.at(0).finish_reason << ")" << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::cerr << "error: " << e.what() << "\n";
  return 1;
}
