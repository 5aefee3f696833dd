#include "core/json.h"

#include <fstream>
#include <sstream>

namespace rlm {

int json_nesting_depth(std::string_view text, int stop_above) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character never opens or closes anything
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > stop_above) return deepest;
      }
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

namespace {

Status check_limits(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return invalid_argument(str("JSON text of ", text.size(), " bytes exceeds the limit of ", limits.max_bytes,
                                " bytes"));
  }
  if (json_nesting_depth(text, limits.max_depth) > limits.max_depth) {
    return invalid_argument(str("JSON nests deeper than ", limits.max_depth, " levels"));
  }
  return Status::ok();
}

template <typename Json>
StatusOr<Json> parse_with_limits(std::string_view text, const JsonLimits& limits) {
  RLM_RETURN_IF_ERROR(check_limits(text, limits));
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(str("not valid JSON: ", e.what()));
  }
}

}  // namespace

StatusOr<nlohmann::json> parse_json(std::string_view text, const JsonLimits& limits) {
  return parse_with_limits<nlohmann::json>(text, limits);
}

StatusOr<nlohmann::ordered_json> parse_ordered_json(std::string_view text, const JsonLimits& limits) {
  return parse_with_limits<nlohmann::ordered_json>(text, limits);
}

StatusOr<nlohmann::json> read_json_file(const std::string& path, const JsonLimits& limits) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(str("cannot open ", path));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size > 0 && static_cast<uint64_t>(size) > limits.max_bytes) {
    return invalid_argument(str(path, ": JSON file of ", size, " bytes exceeds the limit of ", limits.max_bytes,
                                " bytes"));
  }
  in.seekg(0, std::ios::beg);
  std::stringstream buf;
  buf << in.rdbuf();
  StatusOr<nlohmann::json> j = parse_json(buf.str(), limits);
  if (!j.is_ok()) return Status(j.status().code(), str(path, ": ", j.status().message()));
  return j;
}

}  // namespace rlm
