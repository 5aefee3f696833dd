#include "bench/sse_parser.h"

namespace rlm::bench {

void SseParser::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (c == '\n' && last_was_cr_) {  // second half of a CRLF: the line was already ended
      last_was_cr_ = false;
      continue;
    }
    last_was_cr_ = (c == '\r');
    if (c == '\n' || c == '\r') {
      process_line(line_);
      line_.clear();
    } else {
      line_.push_back(c);
    }
  }
}

void SseParser::finish() {
  if (!line_.empty()) {
    process_line(line_);
    line_.clear();
  }
  dispatch();
  last_was_cr_ = false;
}

void SseParser::process_line(std::string_view line) {
  if (line.empty()) {
    dispatch();
    return;
  }
  if (line.front() == ':') return;  // comment / keep-alive
  size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field != "data") return;
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

void SseParser::dispatch() {
  if (!has_data_) return;
  ++num_events_;
  on_event_(data_);
  data_.clear();
  has_data_ = false;
}

}  // namespace rlm::bench
