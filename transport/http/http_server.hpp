// An asynchronous HTTP/1.1 server on Boost.Beast and asio: a fixed pool of threads runs every
// connection (so thousands of open streams cost sockets and buffers, not threads), keep-alive,
// a request-body limit, streamed responses (chunked transfer encoding, for Server-Sent Events),
// disconnect detection while a response is pending, and a graceful stop.
//
// The handler runs on an io thread, once per request, and answers through its Responder from
// any thread: one respond(), or start_stream(), write()... and end(). While the response is
// pending the server keeps reading the socket, so a client that goes away is noticed at once
// (the Responder's on_disconnect callback runs) rather than at the next write.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: "/v1/models?x=1"
  std::string path;    // the target without its query
  std::string body;
  Headers headers;     // names in lower case
  std::string remote;  // "127.0.0.1:54321"
  int version = 11;    // 10 or 11
  /// The value of header `name` (lower case), "" when absent.
  [[nodiscard]] std::string header(std::string_view name) const;
};

/// Answers one request. Every member may be called from any thread; calls after the response
/// ended, or after the client went away, do nothing.
class Responder {
 public:
  virtual ~Responder() = default;
  /// The whole response at once (Content-Length set).
  virtual void respond(int status, std::string content_type, std::string body,
                       Headers extra = {}) = 0;
  /// A streamed response: the status and headers now, the body in pieces.
  virtual void start_stream(int status, std::string content_type, Headers extra = {}) = 0;
  virtual void write(std::string data) = 0;
  virtual void end() = 0;
  /// Runs `f` once if the client disconnects before the response ended (at once when it has
  /// already gone). Runs on an io thread; keep it short.
  virtual void on_disconnect(std::function<void()> f) = 0;
  [[nodiscard]] virtual bool disconnected() const = 0;
};

using Handler = std::function<void(Request, std::shared_ptr<Responder>)>;

struct ServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 8000;  // 0: an ephemeral port (see Server::port)
  int threads = 2;
  size_t max_body_bytes = 16u << 20;                   // larger bodies: 413
  size_t max_header_bytes = 64u << 10;                 // larger headers: 431
  std::chrono::milliseconds keep_alive_timeout{5000};  // an idle connection closes after this
  std::chrono::milliseconds request_timeout{60000};    // the whole request must arrive in this
  std::chrono::milliseconds write_timeout{60000};      // one write to a client that stopped reading
  /// The body of an error the HTTP layer itself answers (400 malformed, 413, 431).
  std::function<std::pair<std::string, std::string>(int status, const std::string& message)>
      error_body;  // returns (content type, body); unset: text/plain
  /// Called when a response starts (for the access log), on an io thread.
  std::function<void(const Request&, int status)> on_response;
};

class Server {
 public:
  /// Binds and listens at once (throws troupe::Error naming the address when it cannot) and
  /// starts `options.threads` threads.
  Server(ServerOptions options, Handler handler);
  /// stop(0) if still running.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// The port it listens on (the one the OS chose for port 0).
  [[nodiscard]] uint16_t port() const;
  /// Open connections now.
  [[nodiscard]] size_t connections() const;
  /// Stops accepting, closes idle connections, lets pending responses finish for up to `grace`,
  /// then closes everything and joins the threads. Idempotent.
  void stop(std::chrono::milliseconds grace);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The reason phrase of an HTTP status ("OK", "Not Found", ...).
[[nodiscard]] std::string_view reason_phrase(int status);

}  // namespace troupe::http
