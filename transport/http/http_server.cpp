#include "transport/http/http_server.hpp"

#include <fmt/format.h>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "runtime/error.hpp"

namespace troupe::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

std::string Request::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return "";
}

std::string_view reason_phrase(int status) {
  const auto sv = bhttp::obsolete_reason(bhttp::int_to_status(unsigned(status)));
  return {sv.data(), sv.size()};
}

namespace {

using Clock = std::chrono::steady_clock;

/// What outlives the Server object for as long as a connection does: the io_context its
/// sockets and strands belong to, and the options.
struct Core {
  ServerOptions options;
  Handler handler;
  asio::io_context ioc;
  std::atomic<bool> stopping{false};
  std::atomic<size_t> connections{0};
  Core(ServerOptions o, Handler h, int threads)
      : options(std::move(o)), handler(std::move(h)), ioc(threads) {}
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string head_of(int status, int version, const std::string& content_type, const Headers& extra,
                    bool keep_alive, std::optional<size_t> content_length, bool chunked) {
  std::string h = fmt::format("HTTP/{}.{} {} {}\r\nserver: troupe\r\n", version / 10, version % 10,
                              status, reason_phrase(status));
  if (!content_type.empty()) h += fmt::format("content-type: {}\r\n", content_type);
  if (content_length) h += fmt::format("content-length: {}\r\n", *content_length);
  if (chunked) h += "transfer-encoding: chunked\r\n";
  for (const auto& [k, v] : extra) h += fmt::format("{}: {}\r\n", k, v);
  h += keep_alive ? "connection: keep-alive\r\n\r\n" : "connection: close\r\n\r\n";
  return h;
}

class Session;

class ResponderImpl : public Responder, public std::enable_shared_from_this<ResponderImpl> {
 public:
  explicit ResponderImpl(std::shared_ptr<Session> s) : session_(std::move(s)) {}
  ~ResponderImpl() override;
  void respond(int status, std::string content_type, std::string body, Headers extra) override;
  void start_stream(int status, std::string content_type, Headers extra) override;
  void write(std::string data) override;
  void end() override;
  void on_disconnect(std::function<void()> f) override;
  [[nodiscard]] bool disconnected() const override { return gone_.load(); }

  std::atomic<bool> gone_{false};
  std::atomic<bool> finished_{false};  // respond() or end() was called

 private:
  std::shared_ptr<Session> session_;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<Core> core, tcp::socket socket)
      : core_(std::move(core)),
        strand_(asio::make_strand(core_->ioc)),
        socket_(std::move(socket)),
        timer_(strand_) {
    ++core_->connections;
    beast::error_code ec;
    socket_.non_blocking(true, ec);  // do_write's send returns rather than waits
    const auto ep = socket_.remote_endpoint(ec);
    if (!ec) remote_ = fmt::format("{}:{}", ep.address().to_string(), ep.port());
  }
  ~Session() { --core_->connections; }

  void start() {
    asio::dispatch(strand_, [self = shared_from_this()] { self->read_header(); });
  }

  /// Graceful stop: idle connections close now, busy ones after their response.
  void stop_gracefully() {
    asio::dispatch(strand_, [self = shared_from_this()] {
      self->keep_alive_ = false;
      if (!self->handling_) self->close();
    });
  }
  void force_close() {
    asio::dispatch(strand_, [self = shared_from_this()] { self->close(); });
  }

  // ---- called (through post) by the Responder ----
  void send_full(int status, const std::string& content_type, std::string body,
                 const Headers& extra) {
    if (!handling_ || head_sent_ || closed_) return;
    head_sent_ = true;
    ending_ = true;
    status_ = status;
    notify_response(status);
    std::string out =
        head_of(status, version_, content_type, extra, keep_alive_, body.size(), false);
    if (!head_request_) out += body;
    enqueue(std::move(out));
  }
  void send_head(int status, const std::string& content_type, const Headers& extra) {
    if (!handling_ || head_sent_ || closed_) return;
    head_sent_ = true;
    status_ = status;
    notify_response(status);
    // HTTP/1.0 has no chunked encoding: the body runs until the connection closes.
    chunked_ = version_ >= 11;
    if (!chunked_) keep_alive_ = false;
    enqueue(head_of(status, version_, content_type, extra, keep_alive_, std::nullopt, chunked_));
  }
  void send_chunk(std::string data) {
    if (!handling_ || !head_sent_ || ending_ || closed_ || data.empty() || head_request_) return;
    enqueue(chunked_ ? fmt::format("{:x}\r\n", data.size()) + data + "\r\n" : std::move(data));
  }
  void send_end() {
    if (!handling_ || closed_ || ending_) return;
    if (!head_sent_) send_head(200, "text/plain", {});
    ending_ = true;
    if (chunked_ && !head_request_)
      enqueue("0\r\n\r\n");
    else
      maybe_finish();
  }
  void set_disconnect_callback(std::function<void()> f) {
    if (client_gone_) {
      f();
      return;
    }
    on_gone_ = std::move(f);
  }
  /// The handler dropped its Responder without answering: a 500, so the client is not left
  /// waiting.
  void abandoned() {
    if (!handling_ || closed_) return;
    if (!head_sent_) {
      auto [type, body] = error_body(500, "the server dropped this request without an answer");
      send_full(500, type, body, {});
    } else {
      send_end();
    }
  }
  asio::strand<asio::io_context::executor_type>& strand() { return strand_; }

 private:
  std::pair<std::string, std::string> error_body(int status, const std::string& message) const {
    if (core_->options.error_body) return core_->options.error_body(status, message);
    return {"text/plain", message};
  }

  void notify_response(int status) {
    if (core_->options.on_response && request_) {
      try {
        core_->options.on_response(*request_, status);
      } catch (...) {
      }
    }
  }

  void arm_timer(std::chrono::milliseconds d) {
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;  // cancelled or re-armed
      self->close();
    });
  }

  void read_header() {
    if (closed_) return;
    if (core_->stopping) {
      close();
      return;
    }
    handling_ = false;
    head_sent_ = ending_ = chunked_ = head_request_ = false;
    request_.reset();
    parser_.emplace();
    parser_->body_limit(core_->options.max_body_bytes);
    parser_->header_limit(std::uint32_t(core_->options.max_header_bytes));
    arm_timer(buffer_.size() > 0 ? core_->options.request_timeout
                                 : core_->options.keep_alive_timeout);
    bhttp::async_read_header(
        socket_, buffer_, *parser_,
        asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
          self->on_header(ec);
        }));
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    const auto& h = parser_->get();
    const auto length = parser_->content_length();
    if (length && *length > core_->options.max_body_bytes)
      return reject(413, fmt::format("the request body ({} bytes) is larger than the limit of {} "
                                     "bytes",
                                     *length, core_->options.max_body_bytes));
    arm_timer(core_->options.request_timeout);
    auto read_body = [self = shared_from_this()] {
      bhttp::async_read(self->socket_, self->buffer_, *self->parser_,
                        asio::bind_executor(self->strand_, [self](beast::error_code ec2, size_t) {
                          self->on_read(ec2);
                        }));
    };
    if (lower(std::string(h[bhttp::field::expect])) == "100-continue" && h.version() >= 11) {
      auto line = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      asio::async_write(socket_, asio::buffer(*line),
                        asio::bind_executor(strand_, [self = shared_from_this(), line, read_body](
                                                         beast::error_code wec, size_t) {
                          if (wec) return self->close();
                          read_body();
                        }));
      return;
    }
    read_body();
  }

  void on_read_error(beast::error_code ec) {
    timer_.cancel();
    if (ec == bhttp::error::body_limit)
      return reject(413, fmt::format("the request body is larger than the limit of {} bytes",
                                     core_->options.max_body_bytes));
    if (ec == bhttp::error::header_limit)
      return reject(431, "the request headers are larger than the limit");
    if (ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
        ec == asio::error::bad_descriptor || ec == bhttp::error::partial_message || closed_)
      return close();
    reject(400, fmt::format("malformed HTTP request: {}", ec.message()));
  }

  /// An error the HTTP layer answers itself; the connection closes after it.
  void reject(int status, const std::string& message) {
    handling_ = true;
    keep_alive_ = false;
    version_ = 11;
    auto [type, body] = error_body(status, message);
    send_full(status, type, std::move(body), {});
  }

  void on_read(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    timer_.cancel();
    auto msg = parser_->release();
    Request req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    req.path = req.target.substr(0, req.target.find('?'));
    req.version = int(msg.version());
    for (const auto& f : msg)
      req.headers.emplace_back(lower(std::string(f.name_string())), std::string(f.value()));
    req.body = std::move(msg.body());
    req.remote = remote_;
    version_ = req.version;
    keep_alive_ = msg.keep_alive() && !core_->stopping;
    head_request_ = req.method == "HEAD";
    handling_ = true;
    request_ = Request{req.method, req.target, req.path, {}, {}, req.remote, req.version};
    auto responder = std::make_shared<ResponderImpl>(shared_from_this());
    responder_ = responder;
    watch();
    try {
      core_->handler(std::move(req), responder);
    } catch (const std::exception& e) {
      responder->respond(500, "text/plain", std::string("internal error: ") + e.what(), {});
    }
  }

  /// Reads while a response is pending: an error or end of stream means the client left.
  void watch() {
    if (watching_ || client_gone_ || closed_) return;
    watching_ = true;
    socket_.async_read_some(
        buffer_.prepare(4096),
        asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t n) {
          self->on_watch(ec, n);
        }));
  }

  void on_watch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (!ec) {
      buffer_.commit(n);  // the start of a pipelined request: kept for the next read
      if (handling_ && buffer_.size() < (64u << 10))
        watch();
      else if (!handling_)
        read_header();
      return;
    }
    if (ec == asio::error::operation_aborted && !handling_ && !closed_) return read_header();
    if (ec == asio::error::operation_aborted && closed_) return;
    gone();
  }

  void gone() {
    if (client_gone_) return;
    client_gone_ = true;
    if (auto r = responder_.lock()) r->gone_ = true;
    if (auto f = std::move(on_gone_)) {
      on_gone_ = nullptr;
      try {
        f();
      } catch (...) {
      }
    }
    close();
  }

  void enqueue(std::string data) {
    out_.push_back(std::move(data));
    do_write();
  }

  void do_write() {
    if (writing_ || out_.empty() || closed_) return;
    wbuf_.clear();
    for (auto& s : out_) wbuf_ += s;
    out_.clear();
    // What fits the socket's send buffer (nearly every streamed chunk) goes now, in one send
    // and with no completion handler or write timer; only a remainder waits for the socket.
    beast::error_code ec;
    const size_t sent = socket_.write_some(asio::buffer(wbuf_), ec);  // non-blocking socket
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) return gone();
    if (!ec && sent == wbuf_.size()) return maybe_finish();
    wbuf_.erase(0, ec ? 0 : sent);
    writing_ = true;
    arm_timer(core_->options.write_timeout);
    asio::async_write(
        socket_, asio::buffer(wbuf_),
        asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
          self->on_write(ec);
        }));
  }

  void on_write(beast::error_code ec) {
    writing_ = false;
    timer_.cancel();
    if (ec) return gone();
    if (!out_.empty()) return do_write();
    maybe_finish();
  }

  /// After the last byte of a response: the next request, or close.
  void maybe_finish() {
    if (!ending_ || writing_ || !out_.empty() || closed_) return;
    handling_ = false;
    on_gone_ = nullptr;
    if (auto r = responder_.lock()) r->finished_ = true;
    responder_.reset();
    if (!keep_alive_ || core_->stopping) {
      beast::error_code ignored;
      socket_.shutdown(tcp::socket::shutdown_send, ignored);
      return close();
    }
    if (watching_) {
      socket_.cancel();  // on_watch then reads the next request
      return;
    }
    read_header();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    timer_.cancel();
    beast::error_code ignored;
    socket_.close(ignored);
    if (auto r = responder_.lock()) r->gone_ = true;
    if (handling_ && !ending_ && !client_gone_) {
      // A close the client did not ask for (stop, timeout) also ends its request.
      client_gone_ = true;
      if (auto f = std::move(on_gone_)) {
        on_gone_ = nullptr;
        try {
          f();
        } catch (...) {
        }
      }
    }
    responder_.reset();
  }

  std::shared_ptr<Core> core_;
  asio::strand<asio::io_context::executor_type> strand_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::optional<Request> request_;  // method, target, remote: for the access log
  // Weak: the handler's reference keeps the Responder alive; when it drops it unanswered, the
  // Responder's destructor answers 500.
  std::weak_ptr<ResponderImpl> responder_;
  std::function<void()> on_gone_;
  std::deque<std::string> out_;
  std::string wbuf_;
  std::string remote_;
  int version_ = 11;
  int status_ = 0;
  bool handling_ = false, head_sent_ = false, ending_ = false, chunked_ = false;
  bool head_request_ = false, keep_alive_ = true, writing_ = false, watching_ = false;
  bool client_gone_ = false, closed_ = false;
};

ResponderImpl::~ResponderImpl() {
  if (finished_) return;
  asio::post(session_->strand(), [s = session_] { s->abandoned(); });
}

void ResponderImpl::respond(int status, std::string content_type, std::string body, Headers extra) {
  if (finished_.exchange(true)) return;
  asio::post(session_->strand(),
             [s = session_, status, ct = std::move(content_type), b = std::move(body),
              e = std::move(extra)]() mutable { s->send_full(status, ct, std::move(b), e); });
}

void ResponderImpl::start_stream(int status, std::string content_type, Headers extra) {
  if (finished_) return;
  asio::post(session_->strand(), [s = session_, status, ct = std::move(content_type),
                                  e = std::move(extra)] { s->send_head(status, ct, e); });
}

void ResponderImpl::write(std::string data) {
  if (finished_ || gone_) return;
  asio::post(session_->strand(),
             [s = session_, d = std::move(data)]() mutable { s->send_chunk(std::move(d)); });
}

void ResponderImpl::end() {
  if (finished_.exchange(true)) return;
  asio::post(session_->strand(), [s = session_] { s->send_end(); });
}

void ResponderImpl::on_disconnect(std::function<void()> f) {
  asio::post(session_->strand(), [s = session_, f = std::move(f)]() mutable {
    s->set_disconnect_callback(std::move(f));
  });
}

}  // namespace

struct Server::Impl {
  std::shared_ptr<Core> core;
  tcp::acceptor acceptor;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  uint16_t port = 0;
  bool stopped = false;

  explicit Impl(std::shared_ptr<Core> c)
      : core(std::move(c)), acceptor(asio::make_strand(core->ioc)) {}

  void accept() {
    acceptor.async_accept(
        asio::make_strand(core->ioc), [this](beast::error_code ec, tcp::socket socket) {
          if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
          if (!ec && !core->stopping) {
            socket.set_option(tcp::no_delay(true), ec);
            auto s = std::make_shared<Session>(core, std::move(socket));
            {
              std::lock_guard lock(mu);
              for (auto it = sessions.begin(); it != sessions.end();)
                it = it->second.expired() ? sessions.erase(it) : std::next(it);
              sessions.emplace(s.get(), s);
            }
            s->start();
          }
          // Out of file descriptors (EMFILE) and similar: try again shortly rather than spin.
          if (ec && ec != asio::error::operation_aborted) {
            auto t = std::make_shared<asio::steady_timer>(core->ioc, std::chrono::milliseconds(50));
            t->async_wait([this, t](beast::error_code) { accept(); });
            return;
          }
          accept();
        });
  }

  std::vector<std::shared_ptr<Session>> live() {
    std::lock_guard lock(mu);
    std::vector<std::shared_ptr<Session>> out;
    for (auto& [p, w] : sessions)
      if (auto s = w.lock()) out.push_back(std::move(s));
    return out;
  }
};

Server::Server(ServerOptions options, Handler handler) {
  const int threads = std::max(1, options.threads);
  auto core = std::make_shared<Core>(std::move(options), std::move(handler), threads);
  impl_ = std::make_unique<Impl>(core);
  const auto& o = core->options;
  beast::error_code ec;
  const auto address = asio::ip::make_address(o.host == "localhost" ? "127.0.0.1" : o.host, ec);
  if (ec) fail("host = '{}': not an IP address ({})", o.host, ec.message());
  const tcp::endpoint ep(address, o.port);
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on {}:{}: {}", o.host, o.port, ec.message());
  impl_->port = a.local_endpoint().port();
  impl_->work.emplace(core->ioc.get_executor());
  impl_->accept();
  for (int i = 0; i < threads; ++i)
    impl_->threads.emplace_back([core] {
      for (;;) {
        try {
          core->ioc.run();
          return;
        } catch (...) {
          // A throwing handler must not take the server down; carry on.
        }
      }
    });
}

Server::~Server() {
  stop(std::chrono::milliseconds(0));
}

uint16_t Server::port() const {
  return impl_->port;
}

size_t Server::connections() const {
  return impl_->core->connections.load();
}

void Server::stop(std::chrono::milliseconds grace) {
  if (impl_->stopped) return;
  impl_->stopped = true;
  auto& core = *impl_->core;
  core.stopping = true;
  asio::post(impl_->acceptor.get_executor(), [this] {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
  });
  for (auto& s : impl_->live()) s->stop_gracefully();
  const auto deadline = Clock::now() + grace;
  while (core.connections.load() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (auto& s : impl_->live()) s->force_close();
  // Let the closes run before the threads go.
  const auto close_deadline = Clock::now() + std::chrono::milliseconds(500);
  while (core.connections.load() > 0 && Clock::now() < close_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->work.reset();
  core.ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace troupe::http
