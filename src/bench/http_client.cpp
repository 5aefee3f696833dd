#include "bench/http_client.h"

// GCC 12 reports Asio's coroutine frame allocator (its own operator new/delete pair, recycling
// frames per thread) as a mismatched new/delete; it is not.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <limits>

#include "core/check.h"

namespace rlm::bench {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

auto with_ec(error_code& ec) { return net::redirect_error(net::use_awaitable, ec); }

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

net::awaitable<void> run_call(const HttpCall& call, const std::function<void(int)>& on_status,
                              const std::function<void(std::string_view)>& on_data, HttpCallResult& out) {
  auto executor = co_await net::this_coro::executor;
  const std::string where = str(call.host, ":", call.port, call.target);
  auto fail = [&](const char* kind, const std::string& what, const error_code& ec) {
    out.error_kind = kind;
    out.error = str(what, " ", where, " failed: ", ec.message());
  };
  error_code ec;
  tcp::resolver resolver(executor);
  // (No temporaries with destructors inside co_await expressions: GCC 12 destroys some twice.)
  const std::string port = std::to_string(call.port);
  auto endpoints = co_await resolver.async_resolve(call.host, port, with_ec(ec));
  if (ec) co_return fail("connect error", "resolving", ec);

  beast::tcp_stream stream(executor);
  stream.expires_after(seconds(call.connect_timeout_s));
  co_await stream.async_connect(endpoints, with_ec(ec));
  if (ec == beast::error::timeout) co_return fail("connect timeout", "connecting to", ec);
  if (ec == net::error::connection_refused) co_return fail("connect refused", "connecting to", ec);
  if (ec) co_return fail("connect error", "connecting to", ec);
  stream.socket().set_option(tcp::no_delay(true), ec);  // no Nagle delay between head and body

  http::request<http::string_body> req{http::string_to_verb(call.method), call.target, 11};
  req.set(http::field::host, str(call.host, ":", call.port));
  for (const auto& [name, value] : call.headers) req.set(name, value);
  req.keep_alive(false);
  req.body() = call.body;
  if (!call.body.empty() || call.method == "POST") req.prepare_payload();
  stream.expires_after(seconds(call.timeout_s));
  co_await http::async_write(stream, req, with_ec(ec));
  if (ec) co_return fail(ec == beast::error::timeout ? "timeout" : "write error", "sending to", ec);

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // (Beast 1.74 mishandles boost::none here)
  stream.expires_after(seconds(call.timeout_s));
  co_await http::async_read_header(stream, buffer, parser, with_ec(ec));
  if (ec) co_return fail(ec == beast::error::timeout ? "timeout" : "read error", "reading the response of", ec);
  out.status = static_cast<int>(parser.get().result_int());
  on_status(out.status);
  char chunk[16 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    stream.expires_after(seconds(call.timeout_s));
    co_await http::async_read_some(stream, buffer, parser, with_ec(ec));  // whatever has arrived
    if (ec == http::error::need_buffer) ec = {};
    const size_t got = sizeof(chunk) - parser.get().body().size;
    if (got > 0) on_data(std::string_view(chunk, got));
    if (ec) co_return fail(ec == beast::error::timeout ? "timeout" : "read error", "reading the response of", ec);
  }
  out.complete = true;
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
}

}  // namespace

HttpCallResult http_call(const HttpCall& call, const std::function<void(int)>& on_status,
                         const std::function<void(std::string_view)>& on_data) {
  HttpCallResult out;
  net::io_context ioc(1);
  net::co_spawn(ioc, run_call(call, on_status, on_data, out), net::detached);
  ioc.run();
  return out;
}

}  // namespace rlm::bench
