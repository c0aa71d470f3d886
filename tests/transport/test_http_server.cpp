// transport/http: the Beast server and client on loopback, with real sockets: keep-alive,
// streamed bodies arriving piece by piece, the body limit, malformed requests, a client that
// disconnects mid-response (noticed at once, not at the next write), an unanswered request,
// and a graceful stop that lets a pending response finish.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "transport/http/http_client.hpp"
#include "transport/http/http_server.hpp"

using namespace troupe::http;
using namespace std::chrono_literals;

namespace {

struct Reply {
  int status = 0;
  std::string body, error;
  std::vector<std::pair<std::chrono::steady_clock::time_point, std::string>> pieces;
};

Reply fetch(Client& c, ClientRequest req) {
  auto p = std::make_shared<std::promise<Reply>>();
  auto r = std::make_shared<Reply>();
  ClientEvents ev;
  ev.on_data = [r](std::string_view d) {
    r->body.append(d);
    r->pieces.emplace_back(std::chrono::steady_clock::now(), std::string(d));
  };
  ev.on_done = [p, r](int status, const std::string& e) {
    r->status = status;
    r->error = e;
    p->set_value(*r);
  };
  if (req.timeout.count() == 0) req.timeout = 10s;
  c.send(std::move(req), std::move(ev));
  auto f = p->get_future();
  REQUIRE(f.wait_for(15s) == std::future_status::ready);
  return f.get();
}

/// A raw client socket (blocking, with a receive timeout).
int raw_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

std::string raw_exchange(uint16_t port, const std::string& request) {
  const int fd = raw_connect(port);
  REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == ssize_t(request.size()));
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

ServerOptions loopback() {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.threads = 2;
  return o;
}

}  // namespace

TEST_CASE("http: keep-alive serves several requests on one connection", "[http]") {
  std::atomic<int> handled{0};
  Server s(loopback(), [&](Request req, std::shared_ptr<Responder> out) {
    ++handled;
    out->respond(200, "text/plain", req.method + " " + req.path + " " + req.body);
  });
  Client c("127.0.0.1", s.port());
  for (int i = 0; i < 3; ++i) {
    ClientRequest r;
    r.target = "/echo?x=" + std::to_string(i);
    r.body = "b" + std::to_string(i);
    const auto reply = fetch(c, r);
    INFO(reply.error);
    CHECK(reply.status == 200);
    CHECK(reply.body == "POST /echo b" + std::to_string(i));
  }
  CHECK(handled == 3);
  CHECK(s.connections() == 1);  // the client reused its connection
}

TEST_CASE("http: a streamed body reaches the client as it is written", "[http]") {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  Server s(loopback(), [&](Request, std::shared_ptr<Responder> out) {
    out->start_stream(200, "text/event-stream");
    out->write("data: one\n\n");
    std::thread([&, out] {
      std::unique_lock lock(mu);
      cv.wait_for(lock, 5s, [&] { return release; });
      out->write("data: two\n\n");
      out->end();
    }).detach();
  });
  Client c("127.0.0.1", s.port());
  auto p = std::make_shared<std::promise<void>>();
  std::atomic<bool> got_first{false};
  std::string body;
  ClientEvents ev;
  ev.on_data = [&](std::string_view d) {
    body.append(d);
    if (body.find("one") != std::string::npos && !got_first.exchange(true)) {
      // The first event arrived while the server still holds the second.
      std::lock_guard lock(mu);
      release = true;
      cv.notify_all();
    }
  };
  int status = 0;
  ev.on_done = [&, p](int st, const std::string&) {
    status = st;
    p->set_value();
  };
  ClientRequest r;
  r.target = "/s";
  r.timeout = 10s;
  c.send(r, std::move(ev));
  REQUIRE(p->get_future().wait_for(10s) == std::future_status::ready);
  CHECK(status == 200);
  CHECK(got_first);
  CHECK(body == "data: one\n\ndata: two\n\n");
}

TEST_CASE("http: bodies over the limit get 413, malformed requests 400", "[http]") {
  ServerOptions o = loopback();
  o.max_body_bytes = 1000;
  o.error_body = [](int status, const std::string& m) {
    return std::make_pair(std::string("application/json"),
                          "{\"status\":" + std::to_string(status) + ",\"m\":\"" + m + "\"}");
  };
  Server s(o,
           [](Request, std::shared_ptr<Responder> out) { out->respond(200, "text/plain", "ok"); });
  Client c("127.0.0.1", s.port());
  ClientRequest big;
  big.target = "/x";
  big.body.assign(5000, 'a');
  const auto r = fetch(c, big);
  CHECK(r.status == 413);
  CHECK(r.body.find("\"status\":413") != std::string::npos);
  const std::string bad = raw_exchange(s.port(), "NOT A REQUEST\r\n\r\n");
  CHECK(bad.rfind("HTTP/1.1 400", 0) == 0);
  // A body that streams past the limit with chunked encoding is stopped too.
  const std::string chunked = raw_exchange(
      s.port(), "POST /x HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n800\r\n" +
                    std::string(2048, 'b') + "\r\n0\r\n\r\n");
  CHECK(chunked.rfind("HTTP/1.1 413", 0) == 0);
}

TEST_CASE("http: a client that goes away is noticed while its response is pending", "[http]") {
  std::promise<void> disconnected;
  std::shared_ptr<Responder> held;
  std::mutex mu;
  Server s(loopback(), [&](Request, std::shared_ptr<Responder> out) {
    out->start_stream(200, "text/event-stream");
    out->on_disconnect([&] { disconnected.set_value(); });
    std::lock_guard lock(mu);
    held = out;  // no answer yet: the "engine" is still working
  });
  const int fd = raw_connect(s.port());
  const std::string req = "POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: 0\r\n\r\n";
  REQUIRE(::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == ssize_t(req.size()));
  char buf[256];
  REQUIRE(::recv(fd, buf, sizeof buf, 0) > 0);  // the headers
  const auto t0 = std::chrono::steady_clock::now();
  ::close(fd);
  REQUIRE(disconnected.get_future().wait_for(5s) == std::future_status::ready);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  std::lock_guard lock(mu);
  CHECK(held->disconnected());
  held->write("late");  // ignored, no crash
  held->end();
}

TEST_CASE("http: a request its handler drops unanswered gets a 500", "[http]") {
  Server s(loopback(), [](Request, std::shared_ptr<Responder>) {});
  Client c("127.0.0.1", s.port());
  ClientRequest r;
  r.target = "/x";
  CHECK(fetch(c, r).status == 500);
}

TEST_CASE("http: a graceful stop lets a pending response finish", "[http]") {
  auto s = std::make_unique<Server>(loopback(), [](Request, std::shared_ptr<Responder> out) {
    out->start_stream(200, "text/plain");
    std::thread([out] {
      std::this_thread::sleep_for(300ms);
      out->write("done");
      out->end();
    }).detach();
  });
  const uint16_t port = s->port();
  Client c("127.0.0.1", port);
  auto p = std::make_shared<std::promise<Reply>>();
  ClientEvents ev;
  auto reply = std::make_shared<Reply>();
  ev.on_data = [reply](std::string_view d) { reply->body.append(d); };
  ev.on_done = [p, reply](int st, const std::string& e) {
    reply->status = st;
    reply->error = e;
    p->set_value(*reply);
  };
  ClientRequest r;
  r.target = "/x";
  r.timeout = 10s;
  c.send(r, std::move(ev));
  std::this_thread::sleep_for(100ms);  // the request is in
  s->stop(5s);
  auto f = p->get_future();
  REQUIRE(f.wait_for(5s) == std::future_status::ready);
  const auto got = f.get();
  CHECK(got.status == 200);
  CHECK(got.body == "done");
  // Nothing listens any more.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0);
  ::close(fd);
}
