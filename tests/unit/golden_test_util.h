// Readers for the reference files of the model tests (tests/golden, tests/data/fp8): JSON files
// and raw little-endian f32 arrays.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/check.h"

namespace rlm::testing {

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  RLM_CHECK(static_cast<bool>(in)) << "cannot open " << path;
  return nlohmann::json::parse(in);
}

inline std::vector<float> read_f32(const std::string& path, size_t count) {
  std::ifstream in(path, std::ios::binary);
  RLM_CHECK(static_cast<bool>(in)) << "cannot open " << path;
  std::vector<float> v(count);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * 4));
  RLM_CHECK(static_cast<size_t>(in.gcount()) == count * 4) << path << " is shorter than " << count << " floats";
  return v;
}

}  // namespace rlm::testing
