#include "server/http_transport.h"

#include <sys/resource.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "server/content_coding.h"

// GCC 12 reports Asio's coroutine frame allocator (its own operator new/delete pair, recycling
// frames per thread) as a mismatched new/delete; it is not.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace rlm {

namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = 16 * 1024;
// Bytes of pipelined requests read ahead while a response is pending; past this the connection
// stops reading until the response is done (TCP flow control then slows the client).
constexpr size_t kMaxReadAhead = 256 * 1024;
constexpr auto kLingerTime = std::chrono::seconds(2);  // reading what a closed-on client still sends

auto with_ec(error_code& ec) { return net::redirect_error(net::use_awaitable, ec); }

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

bool is_parse_error(const error_code& ec) { return ec.category() == http::make_error_code(http::error::bad_method).category(); }

// The status line and header fields of a response; `content_length` nullopt: chunked (HTTP/1.1) or
// delimited by the connection's close (HTTP/1.0).
std::string serialize_head(int status, int version, const std::string& content_type, const HttpHeaders& extra,
                           bool keep_alive, std::optional<size_t> content_length) {
  std::string h = str("HTTP/", version / 10, ".", version % 10, " ", status, " ",
                      std::string(http::obsolete_reason(static_cast<http::status>(status))), "\r\n");
  h += "Server: radixlm\r\n";
  if (!content_type.empty()) h += "Content-Type: " + content_type + "\r\n";
  for (const auto& [name, value] : extra.fields()) h += name + ": " + value + "\r\n";
  if (content_length) {
    h += str("Content-Length: ", *content_length, "\r\n");
  } else if (version >= 11) {
    h += "Transfer-Encoding: chunked\r\n";
  }
  if (!keep_alive) {
    h += "Connection: close\r\n";
  } else if (version < 11) {
    h += "Connection: keep-alive\r\n";
  }
  return h + "\r\n";
}

std::string serialize_response(const HttpResponse& r, const HttpRequest& req, bool keep_alive) {
  std::string out = serialize_head(r.status, req.version, r.content_type, r.headers, keep_alive, r.body.size());
  if (req.method != "HEAD") out += r.body;
  return out;
}

class Connection;

// What connections share: the routes, the limits, and the set of open connections (for stop()).
struct TransportState {
  const HttpRouter* router = nullptr;
  HttpServerConfig config;
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;
};

// The transport's side of one request/response. Lives on its connection's strand; the connection
// drains `out` to the socket and calls client_gone() when the client goes away.
class ExchangeImpl final : public HttpExchange, public std::enable_shared_from_this<ExchangeImpl> {
 public:
  enum class State { kWaiting, kStreaming, kComplete };

  // cors: header fields every response of this request carries (the router's CORS answer).
  ExchangeImpl(std::weak_ptr<Connection> conn, net::any_io_executor executor, HttpRequest request,
               bool keep_alive, int64_t stream_limit, HttpHeaders cors)
      : conn_(std::move(conn)),
        executor_(std::move(executor)),
        request_(std::move(request)),
        keep_alive_(keep_alive),
        stream_limit_(stream_limit),
        cors_(std::move(cors)) {}

  const HttpRequest& request() const override { return request_; }

  void respond(HttpResponse response) override {
    if (state_ != State::kWaiting || gone_) return;
    for (const auto& [name, value] : cors_.fields()) response.headers.add(name, value);
    queue(serialize_response(response, request_, keep_alive_));
    state_ = State::kComplete;
  }

  void begin_stream(int status, std::string content_type, HttpHeaders headers) override {
    if (state_ != State::kWaiting || gone_) return;
    chunked_ = request_.version >= 11;
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the close ends the body
    for (const auto& [name, value] : cors_.fields()) headers.add(name, value);
    queue(serialize_head(status, request_.version, content_type, headers, keep_alive_, std::nullopt));
    state_ = State::kStreaming;
  }

  bool write(std::string data) override {
    if (gone_ || state_ != State::kStreaming) return false;
    if (data.empty()) return true;
    if (chunked_) {
      char size_line[24];
      std::snprintf(size_line, sizeof(size_line), "%zx\r\n", data.size());
      data = size_line + data + "\r\n";
    }
    if (static_cast<int64_t>(queued_ + data.size()) > stream_limit_) {
      std::fprintf(stderr, "radixlm: http: dropping %s: it left more than %lld bytes of its stream unread\n",
                   request_.peer.c_str(), static_cast<long long>(stream_limit_));
      client_gone();
      return false;
    }
    queue(std::move(data));
    return true;
  }

  void end_stream() override {
    if (gone_ || state_ != State::kStreaming) return;
    if (chunked_) queue("0\r\n\r\n");
    state_ = State::kComplete;
    wake();
  }

  void post(std::function<void()> fn) override {
    net::post(executor_, [weak = weak_from_this(), fn = std::move(fn)] {
      try {
        fn();
      } catch (const std::exception& e) {
        if (auto self = weak.lock()) self->fail(e.what());
      }
    });
  }

  void defer(std::chrono::milliseconds delay, std::function<void()> fn) override {
    auto timer = std::make_shared<net::steady_timer>(executor_, delay);
    timer->async_wait([this_ = shared_from_this(), timer, fn = std::move(fn)](error_code) mutable {
      this_->post(std::move(fn));
    });
  }

  void on_disconnect(std::function<void()> fn) override {
    on_disconnect_ = std::move(fn);
    if (gone_ && state_ != State::kComplete) post(on_disconnect_);
  }

  bool disconnected() const override { return gone_; }

  // A route failed with an exception: a 500 if nothing was sent yet, else the connection drops.
  void fail(const std::string& what) {
    std::fprintf(stderr, "radixlm: http: %s %s failed: %s\n", request_.method.c_str(), request_.path.c_str(),
                 what.c_str());
    if (state_ == State::kWaiting) return respond(error_response({500, "internal error: " + what, "internal_error", ""}));
    client_gone();
  }

  // The client went away (closed, reset, timed out, or stopped reading): nothing more is sent and
  // the route learns it through on_disconnect.
  void client_gone() {
    if (gone_) return;
    gone_ = true;
    out_.clear();
    if (state_ != State::kComplete && on_disconnect_) post(on_disconnect_);
    wake();
  }

  // Connection side.
  std::deque<std::string>& out() { return out_; }
  void written(size_t bytes) { queued_ -= bytes; }
  bool complete() const { return state_ == State::kComplete; }
  bool keep_alive() const { return keep_alive_; }

 private:
  void queue(std::string data) {
    queued_ += data.size();
    out_.push_back(std::move(data));
    wake();
  }
  void wake();

  std::weak_ptr<Connection> conn_;  // alive while it sends this exchange
  net::any_io_executor executor_;
  HttpRequest request_;
  bool keep_alive_;
  int64_t stream_limit_;
  State state_ = State::kWaiting;
  bool chunked_ = false;
  bool gone_ = false;
  std::deque<std::string> out_;
  size_t queued_ = 0;  // bytes in out_ and in the write under way
  std::function<void()> on_disconnect_;
  HttpHeaders cors_;
};

// One client connection: a coroutine reading requests one after another (keep-alive, pipelining)
// on the connection's strand, with one deadline timer for whichever read or write is under way.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, TransportState* state)
      : socket_(std::move(socket)), state_(state), deadline_(socket_.get_executor()), wake_(socket_.get_executor()) {
    error_code ec;
    const tcp::endpoint peer = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("?") : peer.address().to_string();
  }

  ~Connection() {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->connections.erase(this);
  }

  net::any_io_executor executor() { return socket_.get_executor(); }

  // From stop(): ends every read, write and wait of this connection.
  void close() {
    closing_ = true;
    if (current_) current_->client_gone();
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    deadline_.cancel();
    wake_.cancel();
  }

  void wake() { wake_.cancel(); }

  // The connection's life; `self` keeps it alive (coroutines start later, after the caller's
  // reference may be gone).
  static net::awaitable<void> run(std::shared_ptr<Connection> self) { co_await self->serve_all(); }

 private:
  net::awaitable<void> serve_all() {
    auto self = shared_from_this();
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->connections.emplace(this, self);
    }
    bool first = true;
    while (!closing_ && !state_->stopping) {
      if (!first && buffer_.size() == 0 && !co_await wait_for_next_request()) break;
      first = false;
      if (!co_await serve_one()) break;
    }
    co_await close_gracefully();
  }

  const HttpServerConfig& config() const { return state_->config; }

  // The deadline of the read or write under way: when it passes, the socket's operations are
  // cancelled and timed_out_ tells why.
  void arm(double limit_s) {
    timed_out_ = false;
    deadline_.expires_after(seconds(limit_s));
    deadline_.async_wait([self = shared_from_this(), gen = ++deadline_gen_](error_code ec) {
      if (ec || gen != self->deadline_gen_) return;
      self->timed_out_ = true;
      error_code ignored;
      self->socket_.cancel(ignored);
    });
  }
  void disarm() {
    ++deadline_gen_;
    deadline_.cancel();
  }

  // Keep-alive: waits (up to the keep-alive timeout) for the first bytes of the next request.
  net::awaitable<bool> wait_for_next_request() {
    error_code ec;
    arm(config().keepalive_timeout_s);
    const size_t n = co_await socket_.async_read_some(buffer_.prepare(kReadChunk), with_ec(ec));
    disarm();
    if (ec) co_return false;
    buffer_.commit(n);
    co_return true;
  }

  // Reads, checks and dispatches one request, then sends its response. false: close the connection.
  net::awaitable<bool> serve_one() {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(std::min<int64_t>(config().max_header_bytes, UINT32_MAX)));
    parser.body_limit(static_cast<std::uint64_t>(config().max_body_bytes));
    error_code ec;
    arm(config().header_timeout_s);
    co_await http::async_read_header(socket_, buffer_, parser, with_ec(ec));
    disarm();
    if (ec) co_return co_await read_failed(ec, "head", config().header_timeout_s);

    HttpRequest req = request_head(parser.get());
    const bool body_pending = !parser.is_done();
    std::optional<ContentCoding> coding;
    const HttpRoute* route = nullptr;
    if (std::optional<HttpResponse> refusal = check_head(req, &coding, &route)) {
      // After a refusal the rest of the message cannot be trusted to frame the next one.
      const bool reuse = !body_pending && refusal->status != 400 && refusal->status != 501 && parser.keep_alive();
      co_await send(*refusal, req, reuse);
      co_return reuse;
    }
    if (body_pending) {
      if (auto expect = req.headers.find("Expect"); expect && req.version >= 11) {
        const std::string go_on = "HTTP/1.1 100 Continue\r\n\r\n";
        co_await write_all(go_on, ec);
        if (ec) co_return false;
      }
      arm(config().body_timeout_s);
      co_await http::async_read(socket_, buffer_, parser, with_ec(ec));
      disarm();
      if (ec) co_return co_await read_failed(ec, "body", config().body_timeout_s);
    }
    bool keep_alive = parser.keep_alive();
    std::string& raw = parser.get().body();
    if (*coding == ContentCoding::kIdentity) {
      req.body = std::move(raw);
    } else {
      StatusOr<std::string> decoded = decode_content(*coding, raw, config().max_body_bytes);
      if (!decoded.is_ok()) {
        const bool too_big = decoded.status().code() == StatusCode::kResourceExhausted;
        const HttpResponse refusal =
            error_response({too_big ? 413 : 400, decoded.status().message(), "invalid_request_error", ""});
        co_await send(refusal, req, keep_alive);
        co_return keep_alive;
      }
      req.body = std::move(decoded).value();
    }

    HttpHeaders cors = state_->router->cors_headers(req);
    auto ex = std::make_shared<ExchangeImpl>(shared_from_this(), executor(), std::move(req), keep_alive,
                                             config().stream_buffer_bytes, std::move(cors));
    current_ = ex;
    try {
      route->handler(ex);
    } catch (const std::exception& e) {
      ex->fail(e.what());
    }
    co_await drive(*ex);
    keep_alive = ex->keep_alive() && !ex->disconnected();
    current_.reset();
    co_return keep_alive;
  }

  HttpRequest request_head(const http::request<http::string_body>& msg) const {
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    req.path = req.target.substr(0, req.target.find('?'));
    req.version = static_cast<int>(msg.version());
    for (const auto& field : msg) req.headers.add(std::string(field.name_string()), std::string(field.value()));
    req.peer = peer_;
    return req;
  }

  // The checks that need only the head: framing, codings, expectations, the route and access.
  std::optional<HttpResponse> check_head(const HttpRequest& req, std::optional<ContentCoding>* coding,
                                         const HttpRoute** route) const {
    auto refuse = [](int status, std::string message) {
      return error_response({status, std::move(message), "invalid_request_error", ""});
    };
    const size_t hosts = req.headers.count("Host");
    if (hosts > 1 || (req.version >= 11 && hosts == 0)) {
      return refuse(400, "an HTTP/1.1 request needs exactly one Host header field");
    }
    if (req.headers.count("Transfer-Encoding") > 0) {
      const std::string_view te = *req.headers.find("Transfer-Encoding");
      if (req.version < 11) return refuse(400, "Transfer-Encoding is not allowed in HTTP/1.0");
      if (req.headers.count("Transfer-Encoding") > 1 || !iequals(te, "chunked")) {
        return refuse(501, str("Transfer-Encoding '", te, "' is not supported (only chunked)"));
      }
    }
    const std::string_view ce = req.headers.find("Content-Encoding").value_or("");
    *coding = req.headers.count("Content-Encoding") > 1 ? std::nullopt : parse_content_coding(ce);
    if (!*coding) {
      HttpResponse r = error_response(
          {415, str("Content-Encoding '", ce, "' is not supported (gzip, deflate or identity)"), "invalid_request_error", ""});
      r.headers.add("Accept-Encoding", "gzip, deflate, identity");
      return r;
    }
    if (auto expect = req.headers.find("Expect"); expect && !iequals(*expect, "100-continue")) {
      return refuse(417, str("Expect '", *expect, "' is not supported"));
    }
    std::string allow;
    *route = state_->router->match(req.method, req.path, &allow);
    if (*route == nullptr && allow.empty()) {
      return error_response({404, str("no route for ", req.method, " ", req.path), "not_found_error", ""});
    }
    if (*route == nullptr) {
      HttpResponse r = error_response({405, str(req.path, " does not accept ", req.method, " (allowed: ", allow, ")"),
                                       "invalid_request_error", ""});
      r.headers.add("Allow", allow);
      return r;
    }
    return state_->router->check_access(req, **route);
  }

  // A read of the head or body failed: answer what can be answered, then close.
  net::awaitable<bool> read_failed(const error_code& ec, const char* part, double limit_s) {
    HttpRequest minimal;  // for the response's version and method
    int status = 0;
    std::string message;
    if (timed_out_) {
      status = 408;
      message = str("the request ", part, " did not arrive within ", limit_s, " s");
    } else if (ec == http::error::header_limit) {
      status = 431;
      message = str("the request head is larger than ", config().max_header_bytes, " bytes");
    } else if (ec == http::error::body_limit) {
      status = 413;
      message = str("the request body is larger than ", config().max_body_bytes, " bytes");
    } else if (is_parse_error(ec) && ec != http::error::end_of_stream && ec != http::error::partial_message) {
      status = 400;
      message = str("malformed HTTP request: ", ec.message());
    }
    if (status != 0) {
      minimal.version = 11;
      const HttpResponse response = error_response({status, message, "invalid_request_error", ""});
      co_await send(response, minimal, false);
    }
    co_return false;
  }

  // A response outside any exchange (protocol errors). (No temporaries with destructors inside
  // co_await expressions in this file: GCC 12 destroys some of them twice.)
  net::awaitable<void> send(const HttpResponse& response, const HttpRequest& req, bool keep_alive) {
    error_code ec;
    HttpResponse with_cors = response;
    const HttpHeaders cors = state_->router->cors_headers(req);
    for (const auto& [name, value] : cors.fields()) with_cors.headers.add(name, value);
    const std::string bytes = serialize_response(with_cors, req, keep_alive);
    co_await write_all(bytes, ec);
  }

  net::awaitable<void> write_all(const std::string& data, error_code& ec) {
    arm(config().send_timeout_s);
    co_await net::async_write(socket_, net::buffer(data), with_ec(ec));
    disarm();
  }

  // Sends what the exchange queues until its response is complete, while watch() notices a client
  // that goes away.
  net::awaitable<void> drive(ExchangeImpl& ex) {
    watch_stop_ = false;
    watching_ = true;
    net::co_spawn(executor(), watch(shared_from_this()), net::detached);
    error_code ec;
    while (!ex.disconnected()) {
      if (!ex.out().empty()) {
        std::vector<std::string> batch;
        while (!ex.out().empty() && batch.size() < 64) {
          batch.push_back(std::move(ex.out().front()));
          ex.out().pop_front();
        }
        std::vector<net::const_buffer> buffers;
        size_t bytes = 0;
        for (const std::string& b : batch) {
          buffers.push_back(net::buffer(b));
          bytes += b.size();
        }
        arm(config().send_timeout_s);
        co_await net::async_write(socket_, buffers, with_ec(ec));
        disarm();
        ex.written(bytes);
        if (ec) {
          ex.client_gone();
          break;
        }
        continue;
      }
      if (ex.complete()) break;
      wake_.expires_at(Clock::time_point::max());
      co_await wake_.async_wait(with_ec(ec));
    }
    watch_stop_ = true;
    if (watching_) {
      error_code ignored;
      socket_.cancel(ignored);
      while (watching_) {
        wake_.expires_at(Clock::time_point::max());
        co_await wake_.async_wait(with_ec(ec));
      }
    }
  }

  // Reads while a response is pending: pipelined requests are kept for later; an end of stream or
  // an error means the client is gone.
  net::awaitable<void> watch(std::shared_ptr<Connection> self) {
    error_code ec;
    while (!watch_stop_ && buffer_.size() < kMaxReadAhead) {
      const size_t n = co_await socket_.async_read_some(buffer_.prepare(kReadChunk), with_ec(ec));
      if (ec) {
        if (!watch_stop_ && current_) current_->client_gone();
        break;
      }
      buffer_.commit(n);
    }
    watching_ = false;
    wake_.cancel();
  }

  // Half-closes, then reads (up to kLingerTime) what the client still sends, so that an answer sent
  // before its request was fully read (413, 431, ...) is not lost to a reset.
  net::awaitable<void> close_gracefully() {
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (!ec && !closing_) {
      arm(std::chrono::duration<double>(kLingerTime).count());
      char sink[kReadChunk];
      while (!ec) co_await socket_.async_read_some(net::buffer(sink), with_ec(ec));
      disarm();
    }
    socket_.close(ec);
  }

  tcp::socket socket_;
  TransportState* state_;
  std::string peer_;
  boost::beast::flat_buffer buffer_;
  net::steady_timer deadline_;
  uint64_t deadline_gen_ = 0;
  bool timed_out_ = false;
  net::steady_timer wake_;  // wakes drive() when its exchange has news
  std::shared_ptr<ExchangeImpl> current_;
  bool watching_ = false;
  bool watch_stop_ = false;
  bool closing_ = false;
};

void ExchangeImpl::wake() {
  if (auto conn = conn_.lock()) conn->wake();
}

}  // namespace

struct HttpTransport::Impl {
  TransportState state;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::string bind_error;
  std::atomic<bool> running{false};
  std::atomic<bool> accepting{false};

  explicit Impl(int threads) : ioc(threads) {}

  net::awaitable<void> accept_loop() {
    accepting = true;
    net::steady_timer backoff(ioc);
    Clock::time_point last_report{};
    while (!state.stopping) {
      tcp::socket socket(net::make_strand(ioc));
      error_code ec;
      co_await acceptor.async_accept(socket, with_ec(ec));
      if (ec) {
        if (state.stopping || ec == net::error::operation_aborted || !acceptor.is_open()) break;
        // Out of descriptors (EMFILE/ENFILE) or a connection reset before accept: wait, go on.
        if (Clock::now() - last_report > std::chrono::seconds(5)) {
          std::fprintf(stderr, "radixlm: http: accept failed: %s (retrying)\n", ec.message().c_str());
          last_report = Clock::now();
        }
        backoff.expires_after(std::chrono::milliseconds(50));
        co_await backoff.async_wait(with_ec(ec));
        continue;
      }
      socket.set_option(tcp::no_delay(true), ec);
      auto conn = std::make_shared<Connection>(std::move(socket), &state);
      net::co_spawn(conn->executor(), Connection::run(conn), net::detached);
    }
    accepting = false;
  }
};

HttpTransport::HttpTransport(const HttpRouter& router, HttpServerConfig config)
    : impl_(std::make_unique<Impl>(std::max(1, config.io_threads))) {
  impl_->state.router = &router;
  impl_->state.config = std::move(config);
}

HttpTransport::~HttpTransport() { stop(); }

const std::string& HttpTransport::bind_error() const { return impl_->bind_error; }

int HttpTransport::bind() {
  const HttpServerConfig& c = impl_->state.config;
  // Thousands of concurrent connections need as many descriptors: raise the soft limit to the hard one.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  error_code ec;
  tcp::endpoint endpoint;
  net::ip::address address = net::ip::make_address(c.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, static_cast<unsigned short>(c.port));
  } else {
    tcp::resolver resolver(impl_->ioc);
    auto results = resolver.resolve(c.host, std::to_string(c.port), tcp::resolver::passive, ec);
    if (ec || results.empty()) {
      impl_->bind_error = str("cannot resolve host '", c.host, "': ", ec ? ec.message() : "no address");
      return -1;
    }
    endpoint = results.begin()->endpoint();
  }
  tcp::acceptor& a = impl_->acceptor;
  auto fail = [&](const char* what) {
    impl_->bind_error = str("cannot listen on ", c.host, ":", c.port, ": ", what, ": ", ec.message());
    error_code ignored;
    a.close(ignored);
    return -1;
  };
  if (a.open(endpoint.protocol(), ec)) return fail("socket");
  // SO_REUSEADDR lets a restarted server bind while old connections linger in TIME_WAIT; without
  // SO_REUSEPORT a second server on the same port is refused instead of silently sharing it.
  if (a.set_option(tcp::acceptor::reuse_address(true), ec)) return fail("SO_REUSEADDR");
  if (a.bind(endpoint, ec)) return fail("bind");
  if (a.listen(std::max(1, c.backlog), ec)) return fail("listen");
  return a.local_endpoint().port();
}

void HttpTransport::run() {
  Impl& impl = *impl_;
  if (!impl.acceptor.is_open() || impl.state.stopping) return;
  impl.running = true;
  net::co_spawn(impl.ioc, impl.accept_loop(), net::detached);
  auto loop = [&impl] {
    for (;;) {
      try {
        impl.ioc.run();
        return;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "radixlm: http: I/O thread: %s\n", e.what());
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, impl.state.config.io_threads); ++i) threads.emplace_back(loop);
  loop();
  for (auto& t : threads) t.join();
  impl.running = false;
}

void HttpTransport::stop() {
  Impl& impl = *impl_;
  if (impl.state.stopping.exchange(true)) return;
  net::post(impl.ioc, [&impl] {
    error_code ec;
    impl.acceptor.close(ec);
  });
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard<std::mutex> lock(impl.state.mu);
    for (auto& [ptr, weak] : impl.state.connections) {
      if (auto c = weak.lock()) open.push_back(std::move(c));
    }
  }
  for (auto& c : open) net::post(c->executor(), [c] { c->close(); });
  open.clear();
  // Let the connections end on their own (the I/O threads then return), but not forever.
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (impl.running && Clock::now() < deadline) {
    bool idle = false;
    {
      std::lock_guard<std::mutex> lock(impl.state.mu);
      idle = impl.state.connections.empty() && !impl.accepting;
    }
    if (idle) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  impl.ioc.stop();
}

}  // namespace rlm
