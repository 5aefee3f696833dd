#include "server/answer_blocks.h"


#include "core/check.h"

namespace rlm {

namespace {

bool all_space(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

}  // namespace

void AnswerBlocks::open(AnswerBlock b, BlockEvents* events) {
  close(events);
  blocks_.push_back(std::move(b));
  open_ = true;
  if (events != nullptr) events->opened(blocks_.size() - 1, blocks_.back());
}

void AnswerBlocks::append(size_t index, std::string_view piece, BlockEvents* events) {
  if (piece.empty()) return;
  blocks_[index].text += piece;
  if (events != nullptr) events->appended(index, blocks_[index], piece);
}

void AnswerBlocks::close(BlockEvents* events) {
  held_space_.clear();
  if (!open_) return;
  open_ = false;
  if (events != nullptr) events->closed(blocks_.size() - 1, blocks_.back());
}

void AnswerBlocks::feed(const OutputDelta& d, BlockEvents* events) {
  const auto open_kind = [&](BlockKind k) { return open_ && blocks_.back().kind == k; };
  if (!d.reasoning.empty()) {
    if (!open_kind(BlockKind::kReasoning)) open({BlockKind::kReasoning, "", "", ""}, events);
    append(blocks_.size() - 1, d.reasoning, events);
  }
  if (!d.content.empty()) {
    if (open_kind(BlockKind::kText)) {
      append(blocks_.size() - 1, d.content, events);
    } else if (all_space(held_space_ + d.content)) {
      held_space_ += d.content;
    } else {
      const std::string text = held_space_ + d.content;
      open({BlockKind::kText, "", "", ""}, events);
      append(blocks_.size() - 1, text, events);
    }
  }
  for (const ToolCallDelta& c : d.calls) {
    if (!c.id.empty()) {
      open({BlockKind::kToolCall, "", c.id, c.name}, events);
      if (call_block_.size() <= static_cast<size_t>(c.index)) call_block_.resize(static_cast<size_t>(c.index) + 1);
      call_block_[static_cast<size_t>(c.index)] = blocks_.size() - 1;
    }
    if (static_cast<size_t>(c.index) < call_block_.size()) append(call_block_[static_cast<size_t>(c.index)], c.arguments, events);
  }
}

std::vector<AnswerBlock> AnswerBlocks::of(const ChatResult& r) {
  OutputDelta whole;
  whole.reasoning = r.view.reasoning;
  whole.content = r.view.content;
  for (size_t i = 0; i < r.view.calls.size(); ++i) {
    whole.calls.push_back({static_cast<int>(i), r.call_ids[i], r.view.calls[i].name, r.view.calls[i].arguments});
  }
  AnswerBlocks blocks;
  blocks.feed(whole, nullptr);
  blocks.close(nullptr);
  return blocks.blocks_;
}

nlohmann::ordered_json call_arguments_object(const std::string& arguments) {
  nlohmann::ordered_json v = nlohmann::ordered_json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  if (v.is_object()) return v;
  return {{"_unparsed_arguments", arguments}};
}

std::string python_json_dumps(const nlohmann::ordered_json& v) {
  const auto scalar = [](const nlohmann::ordered_json& x) {
    return x.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::ordered_json::error_handler_t::replace);
  };
  std::string out;
  if (v.is_object()) {
    out = "{";
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it != v.begin()) out += ", ";
      out += scalar(it.key()) + ": " + python_json_dumps(it.value());
    }
    return out + "}";
  }
  if (v.is_array()) {
    out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i > 0 ? ", " : "") + python_json_dumps(v[i]);
    return out + "]";
  }
  return scalar(v);
}

bool fail_request(ApiError* err, const std::string& param, const std::string& msg) {
  *err = ApiError::bad_request(msg, param);
  return false;
}

std::string type_field(const nlohmann::ordered_json& v) {
  return v.is_object() && v.contains("type") && v["type"].is_string() ? v["type"].get<std::string>() : "";
}

std::string sse_event(std::string_view name, const nlohmann::ordered_json& data) {
  return str("event: ", name, "\ndata: ", data.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
             "\n\n");
}

}  // namespace rlm
