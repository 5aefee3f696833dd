// zlib compression for tests of compressed request bodies (the reference encoder).
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

namespace rlm::testing {

// window_bits: 31 gzip, 15 zlib, -15 raw deflate (zlib's deflateInit2 convention).
inline std::string zlib_compress(const std::string& data, int window_bits, int level = 6) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, level, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, data.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

}  // namespace rlm::testing
