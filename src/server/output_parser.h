// Structure in a chat model's output text: reasoning (<think>...</think>) and tool calls in the
// formats models are trained on (Hermes/Qwen <tool_call> JSON, Llama-3 JSON, Mistral
// [TOOL_CALLS], Qwen3-Coder XML-ish parameters, pythonic lists), turned into OpenAI's
// reasoning_content / content / tool_calls.
//
// One deterministic reading serves streaming and non-streaming alike: read_output(text, final)
// gives the view of an output prefix, built so that a longer prefix only ever extends it (text
// that may still turn into a marker or a call is held back until it is certain). OutputParser
// feeds text and hands out the difference between successive views as deltas; the non-streamed
// answer is the view of the whole text, so the streamed deltas always concatenate to it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace rlm {

enum class ToolFormat { kNone, kHermes, kLlama3Json, kMistral, kQwen3Coder, kPythonic };
enum class ReasoningFormat { kNone, kQwen3, kDeepSeekR1 };

// --tool-call-parser NAME: auto|none|hermes|llama3_json|mistral|qwen3_coder|pythonic; "auto" reads
// the chat template's text (as vLLM and SGLang detect formats). kInvalidArgument for other names.
StatusOr<ToolFormat> tool_format_from_name(std::string_view name, std::string_view chat_template);
ToolFormat detect_tool_format(std::string_view chat_template);
// --reasoning-parser NAME: none|qwen3|deepseek-r1 (deepseek_r1 too).
StatusOr<ReasoningFormat> reasoning_format_from_name(std::string_view name);
const char* tool_format_name(ToolFormat f);

struct ToolCallView {
  std::string name;
  std::string arguments;  // a JSON object's text (a prefix of it while the call is being written)
};

struct OutputView {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallView> calls;
};

struct OutputFormats {
  ToolFormat tools = ToolFormat::kNone;
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  nlohmann::ordered_json tool_defs;  // the request's tools (parameter types for qwen3_coder)
};

// The view of `text`, a prefix of the model's output (final: the whole output).
OutputView read_output(const OutputFormats& formats, std::string_view text, bool final);

// What one step adds. A call's id and name come with its first delta, arguments in pieces.
struct ToolCallDelta {
  int index = 0;
  std::string id;    // non-empty on the call's first delta only
  std::string name;  // likewise
  std::string arguments;
};

struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

class OutputParser {
 public:
  explicit OutputParser(OutputFormats formats) : formats_(std::move(formats)) {}

  // Appends model output; returns what became certain.
  OutputDelta feed(std::string_view text);
  // The output is complete: releases what was held back.
  OutputDelta finish();
  // Everything handed out so far (after finish(): the whole answer).
  const OutputView& view() const { return emitted_; }
  const std::vector<std::string>& call_ids() const { return ids_; }

 private:
  OutputDelta advance(bool final);

  OutputFormats formats_;
  std::string text_;
  OutputView emitted_;
  std::vector<std::string> ids_;
};

}  // namespace rlm
