// Shared helpers for the jinja / chat-template tests: reading the committed golden files and
// pinning strftime_now() to the date tools/make_chat_template_golden.py uses.
#pragma once

#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rlm::jinja_test {

inline std::string data_path(const std::string& name) {
  return std::string(RADIXLM_SOURCE_DIR) + "/tests/data/chat_templates/" + name;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline nlohmann::ordered_json read_json(const std::string& name) {
  return nlohmann::ordered_json::parse(read_file(data_path(name)));
}

inline std::vector<nlohmann::ordered_json> read_jsonl(const std::string& name) {
  std::vector<nlohmann::ordered_json> out;
  std::istringstream in(read_file(data_path(name)));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::ordered_json::parse(line));
  }
  return out;
}

// FIXED_NOW in tools/make_chat_template_golden.py: 2025-03-07 14:05:09.
inline std::tm fixed_now() {
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 2;
  tm.tm_mday = 7;
  tm.tm_hour = 14;
  tm.tm_min = 5;
  tm.tm_sec = 9;
  tm.tm_isdst = -1;
  std::mktime(&tm);  // fills tm_wday / tm_yday
  return tm;
}

// The Status message the C++ side gives for an expected Python exception.
inline bool error_matches(const std::string& message, const std::string& type, const std::string& text) {
  if (type == "TemplateError") return message == text;
  const std::string prefix = type + ": " + text + " (template line ";
  return message.rfind(prefix, 0) == 0;
}

}  // namespace rlm::jinja_test
