// An asynchronous HTTP/1.1 client on Boost.Beast: many requests in flight on one thread, the
// body handed over as it arrives (for Server-Sent Events), keep-alive connections reused.
// `troupe bench serving` drives servers with it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "transport/http/http_server.hpp"

namespace troupe::http {

struct ClientRequest {
  std::string method = "POST";
  std::string target;  // "/v1/completions"
  std::string body;
  Headers headers;  // besides host, content-type (application/json) and content-length
  std::chrono::milliseconds timeout{0};  // 0: none; else the whole exchange must end in this
};

/// Callbacks run on the client's thread, in this order: on_status once the headers are in,
/// on_data for each piece of the body as it arrives, on_done once.
struct ClientEvents {
  std::function<void(int status)> on_status;
  std::function<void(std::string_view data)> on_data;
  std::function<void(int status, const std::string& error)> on_done;  // error "" on success
};

class Client {
 public:
  /// Starts its thread; connects lazily, on the first request.
  Client(std::string host, uint16_t port);
  /// Waits for nothing: requests still in flight are dropped (their on_done does not run).
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// Sends `req`; may be called from any thread.
  void send(ClientRequest req, ClientEvents events);
  /// Runs `f` on the client's thread after `delay` (request pacing).
  void post_after(std::chrono::nanoseconds delay, std::function<void()> f);

  struct Impl;  // public so the exchanges in http_client.cpp can name it

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace troupe::http
