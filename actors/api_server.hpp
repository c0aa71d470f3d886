// The OpenAI-compatible API server: vLLM's HTTP endpoints over a troupe::Engine.
//
//   POST /v1/completions, /v1/chat/completions   (streamed as Server-Sent Events or not)
//   GET  /v1/models                              POST /tokenize, /detokenize
//   GET  /health, /ping (503 once the engine cannot serve), /version, /metrics (Prometheus)
//   POST /generate                               (vLLM's plain api_server)
//
// HTTP runs on transport/http's server (a fixed pool of threads for every connection); each
// generation request gets a request sink actor (request_sink.hpp) in the engine's actor system
// that talks to the engine actor like any client. Parsing, tokenizing and the chat template
// run on the HTTP threads, off the engine's step loop; detokenizing stays in the engine's
// tokenizer pool. The server watches the engine (watch_atom): once it cannot serve, /health
// answers 503, new requests 503, and in-flight streams end with an error event.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "runtime/openai/protocol.hpp"
#include "runtime/openai/server_args.hpp"

namespace troupe {

struct ApiServerConfig {
  openai::ServerArgs args;
  std::vector<std::string> served_model_names;  // the first is what responses report
  std::string model_root;                       // ModelCard.root: the model path
  std::vector<std::string> api_keys;            // --api-key and VLLM_API_KEY
  std::string chat_template;                    // --chat-template's text ("" = the tokenizer's)
  openai::SamplingDefaults sampling_defaults;   // from generation_config.json
  int64_t max_num_seqs = 256;
  bool log_requests = false;
  std::string version;  // what /version answers
};

class ApiServer {
 public:
  /// Listens at once (throws troupe::Error when it cannot) and starts watching the engine.
  ApiServer(caf::actor_system& sys, Engine& engine, ApiServerConfig config);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  [[nodiscard]] uint16_t port() const;
  /// False once the engine reported it cannot serve (or its actor died).
  [[nodiscard]] bool healthy() const;
  /// Why the engine cannot serve ("" while it can).
  [[nodiscard]] std::string failure() const;
  /// Waits until the engine fails or `stop_requested` becomes true, checking every `tick`.
  void wait(const std::atomic<bool>& stop_requested, std::chrono::milliseconds tick) const;
  /// Stops accepting and lets in-flight requests finish for up to `grace`, then closes.
  void stop(std::chrono::milliseconds grace);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

/// The text --chat-template stands for: the file's contents when it names a file, else the
/// argument itself (vLLM's rule); a path-like argument naming no file is an error.
std::string load_chat_template_arg(const std::string& arg);

}  // namespace troupe
