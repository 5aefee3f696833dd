// The asynchronous HTTP transport on loopback with a test router (no model): protocol errors,
// limits after decoding, keep-alive and pipelining, deadlines, disconnect detection while a route
// waits, dropping a client that does not read its stream, and the port not being shared.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/http_transport.h"
#include "unit/zlib_test_util.h"

namespace rlm {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A raw TCP client: whatever bytes the test wants, read back with a deadline.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawClient() { close(); }
  bool connected() const { return connected_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until `want` bytes are buffered, the peer closes, or `timeout_s` passes.
  bool fill(size_t want, double timeout_s) {
    const auto start = Clock::now();
    while (buf_.size() < want && !eof_) {
      const double left = timeout_s - since(start);
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) continue;
      char tmp[65536];
      const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) {
        eof_ = true;
        break;
      }
      buf_.append(tmp, static_cast<size_t>(n));
    }
    return buf_.size() >= want;
  }
  // True when the server closes the connection within `timeout_s` (pending data is read first).
  bool closed_within(double timeout_s) {
    fill(SIZE_MAX, timeout_s);
    return eof_;
  }

  struct Response {
    int status = 0;
    std::string head;
    std::string body;
    std::optional<std::string> header(const std::string& name) const {
      std::string lower = head;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string key = "\r\n" + name + ":";
      for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const size_t at = lower.find(key);
      if (at == std::string::npos) return std::nullopt;
      const size_t from = at + key.size();
      std::string v = head.substr(from, head.find("\r\n", from) - from);
      while (!v.empty() && v.front() == ' ') v.erase(0, 1);
      return v;
    }
  };

  // Reads one response (Content-Length, chunked, or until close). nullopt on timeout.
  std::optional<Response> response(double timeout_s = 10.0) {
    const auto start = Clock::now();
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (eof_ || !fill(buf_.size() + 1, timeout_s - since(start))) return std::nullopt;
    }
    Response r;
    r.head = buf_.substr(0, end + 2);
    buf_.erase(0, end + 4);
    r.status = std::stoi(r.head.substr(9, 3));
    if (auto len = r.header("Content-Length")) {
      const size_t n = std::stoul(*len);
      if (!fill(n, timeout_s - since(start))) return std::nullopt;
      r.body = buf_.substr(0, n);
      buf_.erase(0, n);
    } else if (r.header("Transfer-Encoding")) {
      for (;;) {
        size_t line;
        while ((line = buf_.find("\r\n")) == std::string::npos) {
          if (!fill(buf_.size() + 1, timeout_s - since(start))) return std::nullopt;
        }
        const size_t n = std::stoul(buf_.substr(0, line), nullptr, 16);
        if (!fill(line + 2 + n + 2, timeout_s - since(start))) return std::nullopt;
        r.body += buf_.substr(line + 2, n);
        buf_.erase(0, line + 2 + n + 2);
        if (n == 0) break;
      }
    } else if (r.status != 100) {
      fill(SIZE_MAX, timeout_s - since(start));
      r.body = buf_;
      buf_.clear();
    }
    return r;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buf_;
};

// The body of the client's next response, which must be a 200.
std::string ok_body(RawClient& cl) {
  auto r = cl.response();
  if (!r) {
    ADD_FAILURE() << "no response";
    return "";
  }
  EXPECT_EQ(r->status, 200) << r->head << r->body;
  return r->body;
}

// A transport serving a test router on a free port, on its own thread.
class Served {
 public:
  Served(HttpRouter& router, HttpServerConfig config) : transport_(router, [&] {
    config.port = 0;
    return config;
  }()) {
    port_ = transport_.bind();
    EXPECT_GT(port_, 0) << transport_.bind_error();
    thread_ = std::thread([this] { transport_.run(); });
  }
  ~Served() {
    transport_.stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  HttpTransport transport_;
  int port_ = -1;
  std::thread thread_;
};

std::string get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: test\r\n" + extra + "\r\n";
}

std::string post(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: test\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra +
         "\r\n" + body;
}

std::string gzip(const std::string& data) { return testing::zlib_compress(data, 31, 9); }

// Polls `done` until it holds or `timeout_s` passes.
bool wait_for(const std::function<bool()>& done, double timeout_s) {
  const auto start = Clock::now();
  while (!done() && since(start) < timeout_s) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return done();
}

// Routes: /echo answers the decoded body; /ok answers "ok"; /stream streams "a", "b", "c".
struct TestRoutes {
  HttpRouter router;
  std::atomic<int> disconnects{0};
  std::atomic<bool> write_refused{false};
  std::atomic<int64_t> flood_bytes{0};

  TestRoutes() {
    router.add("POST", "/echo", [](const std::shared_ptr<HttpExchange>& ex) {
      HttpResponse r;
      r.content_type = "text/plain";
      r.body = ex->request().body;
      ex->respond(std::move(r));
    });
    router.add("GET", "/ok", [](const std::shared_ptr<HttpExchange>& ex) {
      HttpResponse r;
      r.body = "ok";
      ex->respond(std::move(r));
    });
    router.add("POST", "/ok", [](const std::shared_ptr<HttpExchange>& ex) { ex->respond(HttpResponse{200, "text/plain", "posted", {}}); });
    router.add("GET", "/stream", [](const std::shared_ptr<HttpExchange>& ex) {
      ex->begin_stream(200, "text/event-stream", {});
      ex->write("a");
      ex->post([ex] {
        ex->write("b");
        ex->defer(std::chrono::milliseconds(20), [ex] {
          ex->write("c");
          ex->end_stream();
        });
      });
    });
    // Never answers: only the client's going away ends it.
    router.add("POST", "/wait", [this](const std::shared_ptr<HttpExchange>& ex) {
      ex->on_disconnect([this] { ++disconnects; });
    });
    // Streams 64 KiB pieces every millisecond until the transport refuses more.
    router.add("GET", "/flood", [this](const std::shared_ptr<HttpExchange>& ex) {
      ex->on_disconnect([this] { ++disconnects; });
      ex->begin_stream(200, "application/octet-stream", {});
      auto step = std::make_shared<std::function<void()>>();
      *step = [this, ex, weak = std::weak_ptr<std::function<void()>>(step)] {
        if (!ex->write(std::string(64 * 1024, 'x'))) {
          write_refused = true;
          return;
        }
        flood_bytes += 64 * 1024;
        if (auto self = weak.lock()) ex->defer(std::chrono::milliseconds(1), [self] { (*self)(); });
      };
      (*step)();
    });
  }
};

HttpServerConfig small_limits() {
  HttpServerConfig c;
  c.io_threads = 2;
  c.max_header_bytes = 4096;
  c.max_body_bytes = 100000;
  return c;
}

TEST(HttpTransport, ProtocolErrorsGetTheirStatusAndTheServerGoesOn) {
  TestRoutes routes;
  Served s(routes.router, small_limits());
  struct Case {
    const char* what;
    std::string request;
    int status;
  };
  const std::vector<Case> cases = {
      {"missing Host", "GET /ok HTTP/1.1\r\n\r\n", 400},
      {"two Host fields", "GET /ok HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"two different Content-Lengths", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", 400},
      {"a field line without a colon", "GET /ok HTTP/1.1\r\nHost: a\r\nbogus\r\n\r\n", 400},
      {"a malformed request line", "GET /ok HTTP/9.9\r\nHost: a\r\n\r\n", 400},
      {"Transfer-Encoding and Content-Length", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400},
      {"an unknown transfer coding", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\nabc", 501},
      {"codings before chunked", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501},
      {"Transfer-Encoding in HTTP/1.0", "POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
      {"an unknown content coding", post("/echo", "abc", "Content-Encoding: br\r\n"), 415},
      {"a corrupt gzip body", post("/echo", "not gzip", "Content-Encoding: gzip\r\n"), 400},
      {"an unknown expectation", post("/echo", "abc", "Expect: 200-ok\r\n"), 417},
      {"no such path", get("/nope"), 404},
      {"a wrong method", "DELETE /ok HTTP/1.1\r\nHost: a\r\n\r\n", 405},
      {"a head over the limit", get("/ok", "X-Big: " + std::string(5000, 'x') + "\r\n"), 431},
      {"a declared body over the limit", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100001\r\n\r\n", 413},
      {"a chunked body over the limit", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" +
                                            std::string("10000\r\n") + std::string(65536, 'y') + "\r\n10000\r\n" +
                                            std::string(65536, 'y') + "\r\n0\r\n\r\n", 413},
      {"a gzip body inflating past the limit", post("/echo", gzip(std::string(10'000'000, '0')), "Content-Encoding: gzip\r\n"), 413},
  };
  for (const Case& c : cases) {
    RawClient cl(s.port());
    ASSERT_TRUE(cl.connected());
    cl.send(c.request);
    auto r = cl.response();
    ASSERT_TRUE(r.has_value()) << c.what;
    EXPECT_EQ(r->status, c.status) << c.what << "\n" << r->head << r->body;
    EXPECT_NE(r->body.find("\"error\""), std::string::npos) << c.what;  // OpenAI-shaped JSON
    if (c.status == 405) {
      EXPECT_EQ(r->header("Allow").value_or(""), "GET, POST");
    }
    if (c.status == 415) {
      EXPECT_TRUE(r->header("Accept-Encoding").has_value());
    }
  }
  RawClient cl(s.port());
  cl.send(get("/ok"));
  EXPECT_EQ(ok_body(cl), "ok");
}

TEST(HttpTransport, BodiesAreDecodedChunkedAndGzipWithinTheLimit) {
  TestRoutes routes;
  Served s(routes.router, small_limits());
  const std::string text(90000, 'q');  // under the 100000-byte limit once decoded
  RawClient cl(s.port());
  cl.send(post("/echo", gzip(text), "Content-Encoding: gzip\r\n"));
  EXPECT_EQ(ok_body(cl), text);
  // Chunked, in pieces, on the same (kept-alive) connection; with Expect: 100-continue.
  cl.send("POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n");
  auto cont = cl.response();
  ASSERT_TRUE(cont.has_value());
  EXPECT_EQ(cont->status, 100);
  cl.send("3\r\nabc\r\n");
  cl.send("2\r\nde\r\n0\r\n\r\n");
  EXPECT_EQ(ok_body(cl), "abcde");
}

TEST(HttpTransport, KeepAliveAndPipelinedRequestsAnswerInOrder) {
  TestRoutes routes;
  Served s(routes.router, small_limits());
  RawClient cl(s.port());
  cl.send(get("/ok") + post("/echo", "second") + get("/stream") + post("/echo", "fourth"));
  std::vector<std::string> bodies;
  for (int i = 0; i < 4; ++i) bodies.push_back(ok_body(cl));
  EXPECT_EQ(bodies, (std::vector<std::string>{"ok", "second", "abc", "fourth"}));
  EXPECT_FALSE(cl.closed_within(0.2));  // still open for more
  // HTTP/1.0 without keep-alive, and Connection: close, end the connection after the response.
  RawClient old(s.port());
  old.send("GET /ok HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(old.response().has_value());
  EXPECT_TRUE(old.closed_within(5));
  RawClient bye(s.port());
  bye.send(get("/ok", "Connection: close\r\n"));
  auto r = bye.response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->header("Connection").value_or(""), "close");
  EXPECT_TRUE(bye.closed_within(5));
}

TEST(HttpTransport, SlowClientsMeetTheirDeadlineWithoutDelayingOthers) {
  TestRoutes routes;
  HttpServerConfig c = small_limits();
  c.header_timeout_s = 1.5;
  c.body_timeout_s = 1.5;
  c.keepalive_timeout_s = 1.5;
  Served s(routes.router, c);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 50; ++i) {
    slow.push_back(std::make_unique<RawClient>(s.port()));
    slow.back()->send("GET /ok HTTP/1.1\r\nHost: a\r\n");  // the head never ends
  }
  RawClient slow_body(s.port());
  slow_body.send("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc");
  const auto start = Clock::now();
  RawClient fast(s.port());
  fast.send(get("/ok"));
  ASSERT_TRUE(fast.response(2.0).has_value());
  EXPECT_LT(since(start), 1.0);  // served before any slow client's deadline
  for (auto& cl : slow) {
    auto r = cl->response(5.0);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 408);
    EXPECT_TRUE(cl->closed_within(5.0));
  }
  auto r = slow_body.response(5.0);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 408);
  // An idle keep-alive connection is closed after its timeout.
  EXPECT_TRUE(fast.closed_within(5.0));
}

TEST(HttpTransport, AClientThatLeavesIsNoticedWhileItsRouteWaits) {
  TestRoutes routes;
  Served s(routes.router, small_limits());
  RawClient cl(s.port());
  cl.send(post("/wait", "{}"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(routes.disconnects.load(), 0);
  const auto start = Clock::now();
  cl.close();
  EXPECT_TRUE(wait_for([&] { return routes.disconnects.load() == 1; }, 5.0));
  EXPECT_LT(since(start), 1.0);
}

TEST(HttpTransport, AClientThatDoesNotReadItsStreamIsDropped) {
  TestRoutes routes;
  HttpServerConfig c = small_limits();
  c.stream_buffer_bytes = 256 * 1024;
  Served s(routes.router, c);
  RawClient cl(s.port());
  cl.send(get("/flood"));  // and never read
  EXPECT_TRUE(wait_for([&] { return routes.write_refused.load(); }, 20.0));
  EXPECT_TRUE(wait_for([&] { return routes.disconnects.load() == 1; }, 20.0));
  // What was queued stayed bounded: kernel socket buffers plus the stream buffer, not the flood.
  EXPECT_LT(routes.flood_bytes.load(), int64_t{64} << 20);
}

TEST(HttpTransport, ASecondServerCannotTakeTheSamePort) {
  TestRoutes routes;
  HttpTransport first(routes.router, small_limits());
  HttpServerConfig c = small_limits();
  c.port = 0;
  HttpTransport a(routes.router, c);
  const int port = a.bind();
  ASSERT_GT(port, 0) << a.bind_error();
  c.port = port;
  HttpTransport b(routes.router, c);
  EXPECT_EQ(b.bind(), -1);
  EXPECT_NE(b.bind_error().find("in use"), std::string::npos) << b.bind_error();
}

}  // namespace
}  // namespace rlm
