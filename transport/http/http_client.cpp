#include "transport/http/http_client.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <limits>
#include <optional>
#include <thread>
#include <vector>

namespace troupe::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

struct Client::Impl : std::enable_shared_from_this<Client::Impl> {
  std::string host;
  uint16_t port;
  asio::io_context ioc{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::unique_ptr<tcp::socket>> idle;  // keep-alive connections
  std::thread thread;

  Impl(std::string h, uint16_t p) : host(std::move(h)), port(p) {}
};

namespace {

/// One request/response exchange.
struct Exchange : std::enable_shared_from_this<Exchange> {
  Exchange() {}  // user-provided, so make_shared does not zero `chunk` (value-initialization)
  std::shared_ptr<Client::Impl> client;
  ClientRequest req;
  ClientEvents ev;
  std::unique_ptr<tcp::socket> socket;
  bool reused = false;     // the socket came from the keep-alive pool
  bool got_bytes = false;  // any of the response arrived (no retry after that)
  bool done = false;
  beast::flat_buffer buffer;
  bhttp::request<bhttp::string_body> msg;
  std::optional<bhttp::response_parser<bhttp::buffer_body>> parser;
  // Not zeroed: each read fills what it reports. (A zeroed 16 KiB per exchange was a third of
  // the client thread's time while it opened a burst of connections; 2026-12-06.)
  std::array<char, 16384> chunk;
  std::optional<asio::steady_timer> timer;
  int status = 0;

  void start() {
    msg = {};
    msg.method_string(req.method);
    msg.target(req.target);
    msg.version(11);
    msg.set(bhttp::field::host, client->host);
    msg.set(bhttp::field::content_type, "application/json");
    for (const auto& [k, v] : req.headers) msg.set(k, v);
    msg.body() = req.body;
    msg.prepare_payload();
    msg.keep_alive(true);
    if (req.timeout.count() > 0 && !timer) {
      timer.emplace(client->ioc, req.timeout);
      timer->async_wait([self = shared_from_this()](beast::error_code ec) {
        if (ec || self->done) return;
        if (self->socket) {
          beast::error_code ignored;
          self->socket->close(ignored);
        }
        self->finish("timed out");
      });
    }
    if (!client->idle.empty()) {
      socket = std::move(client->idle.back());
      client->idle.pop_back();
      reused = true;
      return write();
    }
    connect();
  }

  void connect() {
    reused = false;
    socket = std::make_unique<tcp::socket>(client->ioc);
    beast::error_code ec;
    const auto address =
        asio::ip::make_address(client->host == "localhost" ? "127.0.0.1" : client->host, ec);
    if (ec) return finish("bad host " + client->host + ": " + ec.message());
    socket->async_connect(tcp::endpoint(address, client->port),
                          [self = shared_from_this()](beast::error_code cec) {
                            if (cec) return self->finish("connect: " + cec.message());
                            beast::error_code ignored;
                            self->socket->set_option(tcp::no_delay(true), ignored);
                            self->write();
                          });
  }

  void write() {
    bhttp::async_write(*socket, msg, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->retry_or_fail("write: " + ec.message());
      self->parser.emplace();
      // No limit (Beast 1.74 mishandles boost::none here: it compares lengths against it).
      self->parser->body_limit(std::numeric_limits<std::uint64_t>::max());
      bhttp::async_read_header(*self->socket, self->buffer, *self->parser,
                               [self](beast::error_code rec, size_t) { self->on_header(rec); });
    });
  }

  /// A pooled connection the server had closed fails before any answer: once more, fresh.
  void retry_or_fail(const std::string& what) {
    if (reused && !got_bytes && !done) {
      buffer.clear();
      return connect();
    }
    finish(what);
  }

  void on_header(beast::error_code ec) {
    if (ec) return retry_or_fail("read: " + ec.message());
    got_bytes = true;
    status = int(parser->get().result_int());
    if (ev.on_status) ev.on_status(status);
    read_body();
  }

  void read_body() {
    if (parser->is_done()) return finish("");
    parser->get().body().data = chunk.data();
    parser->get().body().size = chunk.size();
    bhttp::async_read_some(*socket, buffer, *parser,
                           [self = shared_from_this()](beast::error_code ec, size_t) {
                             if (ec == bhttp::error::need_buffer) ec = {};
                             const size_t n = self->chunk.size() - self->parser->get().body().size;
                             if (n > 0 && self->ev.on_data && !self->done)
                               self->ev.on_data(std::string_view(self->chunk.data(), n));
                             if (ec) return self->finish("read: " + ec.message());
                             self->read_body();
                           });
  }

  void finish(const std::string& error) {
    if (done) return;
    done = true;
    if (timer) timer->cancel();
    if (error.empty() && parser && parser->keep_alive() && socket && socket->is_open() &&
        buffer.size() == 0)
      client->idle.push_back(std::move(socket));
    else if (socket) {
      beast::error_code ignored;
      socket->close(ignored);
    }
    if (ev.on_done) ev.on_done(status, error);
  }
};

}  // namespace

Client::Client(std::string host, uint16_t port)
    : impl_(std::make_shared<Impl>(std::move(host), port)) {
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->thread = std::thread([impl = impl_] { impl->ioc.run(); });
}

Client::~Client() {
  impl_->work.reset();
  impl_->ioc.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void Client::send(ClientRequest req, ClientEvents events) {
  asio::post(impl_->ioc, [impl = impl_, req = std::move(req), ev = std::move(events)]() mutable {
    auto x = std::make_shared<Exchange>();
    x->client = impl;
    x->req = std::move(req);
    x->ev = std::move(ev);
    x->start();
  });
}

void Client::post_after(std::chrono::nanoseconds delay, std::function<void()> f) {
  auto t = std::make_shared<asio::steady_timer>(impl_->ioc);
  t->expires_after(delay);
  t->async_wait([t, f = std::move(f)](beast::error_code ec) {
    if (!ec) f();
  });
}

}  // namespace troupe::http
