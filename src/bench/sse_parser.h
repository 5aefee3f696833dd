// Incremental parser for Server-Sent Events (text/event-stream) as OpenAI-compatible servers
// stream them: "data: {...}\n\n" events ending with "data: [DONE]".
//
// Bytes arrive in arbitrary pieces (an HTTP read can end anywhere, mid-line or mid-CRLF), so the
// parser buffers the partial line. Per the SSE spec an event is dispatched at a blank line; its
// payload is its "data:" lines joined with '\n' (one space after the colon is dropped). Lines
// starting with ':' are comments; other fields (event:, id:, retry:) are ignored.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace rlm::bench {

class SseParser {
 public:
  // Called once per dispatched event with its data payload (e.g. a JSON object or "[DONE]").
  using EventCallback = std::function<void(std::string_view data)>;

  explicit SseParser(EventCallback on_event) : on_event_(std::move(on_event)) {}

  // Consumes the next piece of the stream.
  void feed(std::string_view bytes);
  // End of stream: a last line without '\n' and an event without its blank line are dispatched.
  void finish();

  // Number of events dispatched so far.
  size_t num_events() const { return num_events_; }

 private:
  void process_line(std::string_view line);
  void dispatch();

  EventCallback on_event_;
  std::string line_;          // the current, incomplete line
  std::string data_;          // data lines of the current event, joined with '\n'
  bool has_data_ = false;     // the current event has at least one data line
  bool last_was_cr_ = false;  // previous byte was '\r' (so a following '\n' is part of CRLF)
  size_t num_events_ = 0;
};

}  // namespace rlm::bench
