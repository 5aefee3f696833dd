// A chat answer as the ordered content blocks of the Anthropic Messages and OpenAI Responses APIs:
// reasoning, text and one block per tool call. AnswerBlocks turns the output parser's deltas into
// blocks opened, extended and closed in order (the streamed events), and the non-streamed answer
// is the same reading of the whole output, so both APIs' streams add up to their bodies.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/generation_handler.h"
#include "server/output_parser.h"

namespace rlm {

enum class BlockKind { kReasoning, kText, kToolCall };

struct AnswerBlock {
  BlockKind kind = BlockKind::kText;
  std::string text;     // the reasoning or text, or a tool call's arguments (JSON text)
  std::string call_id;  // tool calls
  std::string name;
};

// What a stream writes as blocks change; `b` is the block as it stands after the change.
class BlockEvents {
 public:
  virtual ~BlockEvents() = default;
  virtual void opened(size_t index, const AnswerBlock& b) = 0;
  virtual void appended(size_t index, const AnswerBlock& b, std::string_view piece) = 0;
  virtual void closed(size_t index, const AnswerBlock& b) = 0;
};

class AnswerBlocks {
 public:
  // Adds what one delta brings (events: null, or told of every change). Text that is only white
  // space (between reasoning and tool calls, say) opens no block until something else follows it.
  void feed(const OutputDelta& d, BlockEvents* events);
  // The answer is complete: closes the open block.
  void close(BlockEvents* events);
  const std::vector<AnswerBlock>& blocks() const { return blocks_; }

  // The blocks of a whole answer (closed).
  static std::vector<AnswerBlock> of(const ChatResult& r);

 private:
  void open(AnswerBlock b, BlockEvents* events);
  void append(size_t index, std::string_view piece, BlockEvents* events);

  std::vector<AnswerBlock> blocks_;
  bool open_ = false;
  std::string held_space_;          // white-space text not yet given a block
  std::vector<size_t> call_block_;  // block index of each tool call
};

// A tool call's arguments as a JSON object: the parser's text parsed, or (a call cut off by
// max_tokens, or arguments that are not an object) {"_unparsed_arguments": text}.
nlohmann::ordered_json call_arguments_object(const std::string& arguments);

// A JSON value as Python's json.dumps writes it by default (", " and ": " separators, non-ASCII
// escaped): how clients usually write a tool call's arguments string, so a call given as an object
// renders through the chat template like the same call sent to /v1/chat/completions.
std::string python_json_dumps(const nlohmann::ordered_json& v);

// Shared by the Messages and Responses request readers: sets *err to a 400 naming `param` and
// returns false; the "type" string of an object ("" when there is none).
bool fail_request(ApiError* err, const std::string& param, const std::string& msg);
std::string type_field(const nlohmann::ordered_json& v);

// One Server-Sent Event with an event name ("event: NAME\ndata: JSON\n\n").
std::string sse_event(std::string_view name, const nlohmann::ordered_json& data);

}  // namespace rlm
