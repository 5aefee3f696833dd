#include "server/content_coding.h"

#include <zlib.h>

#include "server/http_exchange.h"

namespace rlm {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// One zlib pass with the given window bits (31: gzip, 15: zlib, -15: raw deflate). Gzip input may
// hold several members back to back (RFC 1952 allows it); each is decoded in turn.
StatusOr<std::string> inflate_with(std::string_view in, int window_bits, int64_t max_out) {
  z_stream zs{};
  if (inflateInit2(&zs, window_bits) != Z_OK) return internal_error("zlib: inflateInit2 failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  std::string out;
  char buf[64 * 1024];
  Status st = Status::ok();
  for (;;) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    const size_t got = sizeof(buf) - zs.avail_out;
    if (static_cast<int64_t>(out.size() + got) > max_out) {
      st = Status(StatusCode::kResourceExhausted,
                  str("the decoded request body is larger than the limit of ", max_out, " bytes"));
      break;
    }
    out.append(buf, got);
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      if (window_bits != 31 || inflateReset(&zs) != Z_OK) {
        st = invalid_argument("the compressed request body has trailing data");
        break;
      }
      continue;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && got == 0) {
      st = invalid_argument("the compressed request body is truncated");
      break;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      st = invalid_argument(str("the compressed request body is corrupt (zlib: ", zs.msg ? zs.msg : "error", ")"));
      break;
    }
  }
  inflateEnd(&zs);
  if (!st.is_ok()) return st;
  return out;
}

}  // namespace

std::optional<ContentCoding> parse_content_coding(std::string_view value) {
  value = trim(value);
  if (value.empty() || iequals(value, "identity")) return ContentCoding::kIdentity;
  if (iequals(value, "gzip") || iequals(value, "x-gzip")) return ContentCoding::kGzip;
  if (iequals(value, "deflate")) return ContentCoding::kDeflate;
  return std::nullopt;
}

StatusOr<std::string> decode_content(ContentCoding coding, std::string_view in, int64_t max_out) {
  switch (coding) {
    case ContentCoding::kIdentity:
      if (static_cast<int64_t>(in.size()) > max_out) {
        return Status(StatusCode::kResourceExhausted,
                      str("the request body is larger than the limit of ", max_out, " bytes"));
      }
      return std::string(in);
    case ContentCoding::kGzip:
      return inflate_with(in, 31, max_out);
    case ContentCoding::kDeflate: {
      // HTTP's "deflate" is the zlib format (RFC 1950); some clients send raw deflate instead.
      auto zlib = inflate_with(in, 15, max_out);
      if (zlib.is_ok() || zlib.status().code() == StatusCode::kResourceExhausted) return zlib;
      auto raw = inflate_with(in, -15, max_out);
      return raw.is_ok() || raw.status().code() == StatusCode::kResourceExhausted ? raw : zlib;
    }
  }
  return internal_error("unknown content coding");
}

}  // namespace rlm
