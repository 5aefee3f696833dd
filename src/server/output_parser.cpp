#include "server/output_parser.h"

#include <cctype>
#include <optional>

#include "server/request_ids.h"

namespace rlm {

using ojson = nlohmann::ordered_json;

namespace {

constexpr size_t npos = std::string_view::npos;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_ws(std::string_view s, size_t p) {
  while (p < s.size() && is_ws(s[p])) ++p;
  return p;
}

bool all_ws(std::string_view s) { return skip_ws(s, 0) == s.size(); }

// Length of the longest suffix of `s` that is a proper prefix of `marker` (text that may still
// become the marker and must be held back).
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// `s` up to the end, minus a tail that may become `marker` unless final.
std::string_view settled(std::string_view s, std::string_view marker, bool final) {
  return final ? s : s.substr(0, s.size() - partial_marker(s, marker));
}

// End (exclusive) of the JSON string token starting at s[p] == '"', or npos while incomplete.
size_t string_end(std::string_view s, size_t p, char quote = '"') {
  for (size_t i = p + 1; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == quote) {
      return i + 1;
    }
  }
  return npos;
}

// End (exclusive) of the JSON value starting at s[p] (no leading space), or npos while it may
// still go on. Brackets are counted, strings skipped; a scalar ends at a delimiter.
size_t value_end(std::string_view s, size_t p) {
  if (p >= s.size()) return npos;
  if (s[p] == '"') return string_end(s, p);
  if (s[p] != '{' && s[p] != '[') {
    for (size_t i = p; i < s.size(); ++i) {
      if (s[i] == ',' || s[i] == '}' || s[i] == ']' || is_ws(s[i])) return i;
    }
    return npos;
  }
  int depth = 0;
  for (size_t i = p; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"') {
      i = string_end(s, i);
      if (i == npos) return npos;
      --i;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return npos;
}

// One JSON call object {"name": ..., "arguments"|"parameters": {...}} read from s[p].
struct CallScan {
  enum State { kMore, kBad, kDone } state = kMore;
  bool named = false;  // the name is certain (the call may be shown)
  ToolCallView call;
  size_t end = 0;      // after the object when kDone
};

// The whole object parsed at once (keys in another order): a call, or bad.
CallScan scan_whole_call(std::string_view s, size_t p, bool final) {
  CallScan r;
  const size_t end = value_end(s, p);
  if (end == npos) {
    r.state = final ? CallScan::kBad : CallScan::kMore;
    return r;
  }
  ojson j = ojson::parse(s.substr(p, end - p), nullptr, /*allow_exceptions=*/false);
  const char* args_key = j.is_object() && j.contains("parameters") ? "parameters" : "arguments";
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) {
    r.state = CallScan::kBad;
    return r;
  }
  r.state = CallScan::kDone;
  r.named = true;
  r.call.name = j["name"].get<std::string>();
  r.call.arguments = j.contains(args_key) ? j[args_key].dump() : "{}";
  r.end = end;
  return r;
}

// Reads {"name": "f", "arguments": <value>} incrementally: the name once its string is complete,
// then the arguments' raw text as it arrives (so streamed pieces concatenate to the final text).
CallScan scan_call(std::string_view s, size_t p, bool final) {
  CallScan r;
  p = skip_ws(s, p);
  if (p >= s.size()) {
    r.state = final ? CallScan::kBad : CallScan::kMore;
    return r;
  }
  if (s[p] != '{') {
    r.state = CallScan::kBad;
    return r;
  }
  const size_t start = p;
  auto key_at = [&](size_t q, std::string* key) -> size_t {  // end of a "key": or npos / 0 (not a key)
    q = skip_ws(s, q);
    if (q >= s.size()) return npos;
    if (s[q] != '"') return 0;
    const size_t e = string_end(s, q);
    if (e == npos) return npos;
    *key = std::string(s.substr(q + 1, e - q - 2));
    const size_t colon = skip_ws(s, e);
    if (colon >= s.size()) return npos;
    return s[colon] == ':' ? colon + 1 : 0;
  };
  std::string key;
  size_t q = key_at(p + 1, &key);
  if (q == npos) return final ? scan_whole_call(s, start, final) : r;
  if (q == 0 || key != "name") return scan_whole_call(s, start, final);
  q = skip_ws(s, q);
  if (q >= s.size()) return final ? scan_whole_call(s, start, final) : r;
  if (s[q] != '"') return scan_whole_call(s, start, final);
  const size_t name_end = string_end(s, q);
  if (name_end == npos) return final ? scan_whole_call(s, start, final) : r;
  const ojson name = ojson::parse(s.substr(q, name_end - q), nullptr, false);
  if (!name.is_string()) return scan_whole_call(s, start, final);
  r.named = true;
  r.call.name = name.get<std::string>();
  q = skip_ws(s, name_end);
  if (q < s.size() && s[q] == '}') {  // no arguments
    r.call.arguments = "{}";
    r.state = CallScan::kDone;
    r.end = q + 1;
    return r;
  }
  if (q >= s.size() || s[q] != ',') {
    if (q < s.size() || final) r.state = CallScan::kDone, r.call.arguments = "{}", r.end = q;
    return r;
  }
  const size_t k = key_at(q + 1, &key);
  if (k == npos || k == 0 || (key != "arguments" && key != "parameters")) {
    if (k == npos && !final) return r;
    // Some other key: the object must be read whole; the name is already certain.
    const size_t end = value_end(s, start);
    if (end != npos || final) {
      r.state = CallScan::kDone;
      const ojson j = end != npos ? ojson::parse(s.substr(start, end - start), nullptr, false) : ojson();
      r.call.arguments = j.is_object() && j.contains("arguments")    ? j["arguments"].dump()
                         : j.is_object() && j.contains("parameters") ? j["parameters"].dump()
                                                                     : "{}";
      r.end = end != npos ? end : s.size();
    }
    return r;
  }
  const size_t v = skip_ws(s, k);
  const size_t v_end = value_end(s, v);
  if (v_end == npos) {
    r.call.arguments = std::string(v < s.size() ? s.substr(v) : std::string_view());
    if (final) r.state = CallScan::kDone, r.end = s.size();
    return r;
  }
  r.call.arguments = std::string(s.substr(v, v_end - v));
  const size_t close = value_end(s, start);
  if (close != npos || final) {
    r.state = CallScan::kDone;
    r.end = close != npos ? close : s.size();
  }
  return r;
}

// Text between and after tool blocks: dropped when only whitespace, held until it is known.
void add_between(std::string& content, std::string_view between, bool known) {
  if (known && !all_ws(between)) content += between;
}

constexpr std::string_view kToolOpen = "<tool_call>";

// The text before the next <tool_call> at or after pos into content: the position of that block,
// or npos (the rest was taken, held back as needed).
size_t text_before_block(std::string_view text, size_t pos, bool after_call, bool final, std::string& content) {
  const size_t open = text.find(kToolOpen, pos);
  const std::string_view before = text.substr(pos, open == npos ? npos : open - pos);
  if (after_call) {
    add_between(content, before, open != npos || final);
  } else {
    content += open == npos ? settled(before, kToolOpen, final) : before;
  }
  return open;
}

// <tool_call>{json}</tool_call> blocks (Hermes, Qwen2.5/Qwen3); text outside them is content.
OutputView read_hermes(std::string_view text, bool final) {
  static constexpr std::string_view kClose = "</tool_call>";
  OutputView v;
  size_t pos = 0;
  bool after_call = false;
  while (true) {
    const size_t open = text_before_block(text, pos, after_call, final, v.content);
    if (open == npos) return v;
    const size_t body = open + kToolOpen.size();
    const size_t close = text.find(kClose, body);
    const bool closed = close != npos;
    const std::string_view inner =
        closed ? text.substr(body, close - body) : settled(text.substr(body), kClose, final);
    const CallScan c = scan_call(inner, 0, closed || final);
    if (c.state == CallScan::kBad || (!c.named && (closed || final))) {
      if (!closed && !final) return v;
      v.content += text.substr(open, closed ? close + kClose.size() - open : npos);  // not a call: text
    } else if (c.named) {
      v.calls.push_back(c.call);
      after_call = true;
    }
    if (!closed) return v;
    pos = close + kClose.size();
  }
}

// Calls that must open the output (Llama-3 JSON, pythonic): `starts` tells whether the settled
// start of the output opens calls (true), cannot (false), or is not known yet (nullopt).
std::optional<bool> opens_calls(std::string_view text, std::string_view tag, char first, bool final, size_t* at) {
  size_t p = skip_ws(text, 0);
  if (text.substr(p, tag.size()) == tag) p = skip_ws(text, p + tag.size());
  if (p >= text.size() || (text.size() - p < tag.size() && tag.substr(0, text.size() - p) == text.substr(p))) {
    if (final) return false;
    return std::nullopt;
  }
  *at = p;
  return text[p] == first;
}

// Llama 3.1/3.2: the whole output is `{"name": ..., "parameters": {...}}` calls separated by ';'
// (optionally after <|python_tag|>), or it is content.
OutputView read_llama3_json(std::string_view text, bool final) {
  OutputView v;
  size_t p = 0;
  const std::optional<bool> calls = opens_calls(text, "<|python_tag|>", '{', final, &p);
  if (!calls) return v;
  if (!*calls) {
    v.content = text;
    return v;
  }
  while (true) {
    const CallScan c = scan_call(text, p, final);
    if (c.state == CallScan::kBad || (!c.named && final)) {
      if (v.calls.empty()) v.content = text;  // plain JSON content, not a call
      else v.content = text.substr(p);
      return v;
    }
    if (c.named) v.calls.push_back(c.call);
    if (c.state != CallScan::kDone) return v;
    p = skip_ws(text, c.end);
    if (p < text.size() && text[p] == ';') p = skip_ws(text, p + 1);
    if (p >= text.size()) return v;
  }
}

// Mistral: content, then [TOOL_CALLS] followed by a JSON array of calls, or (newer tokenizers)
// one or more `name[ARGS]{...}` calls each after its own [TOOL_CALLS].
OutputView read_mistral(std::string_view text, bool final) {
  static constexpr std::string_view kMarker = "[TOOL_CALLS]", kArgs = "[ARGS]";
  OutputView v;
  const size_t m = text.find(kMarker);
  if (m == npos) {
    v.content = settled(text, kMarker, final);
    return v;
  }
  v.content = text.substr(0, m);
  size_t p = skip_ws(text, m + kMarker.size());
  if (p >= text.size()) return v;
  if (text[p] == '[') {
    p = skip_ws(text, p + 1);
    while (p < text.size() && text[p] != ']') {
      const CallScan c = scan_call(text, p, final);
      if (c.state == CallScan::kBad || (!c.named && final)) {
        v.content += text.substr(p);
        return v;
      }
      if (c.named) v.calls.push_back(c.call);
      if (c.state != CallScan::kDone) return v;
      p = skip_ws(text, c.end);
      if (p < text.size() && text[p] == ',') p = skip_ws(text, p + 1);
    }
    return v;
  }
  while (true) {  // name[ARGS]{...}, possibly repeated after further [TOOL_CALLS]
    const size_t a = text.find(kArgs, p);
    if (a == npos) {
      if (final) v.content += text.substr(p);
      return v;
    }
    ToolCallView call;
    call.name = std::string(text.substr(p, a - p));
    const size_t s = skip_ws(text, a + kArgs.size());
    const size_t e = value_end(text, s);
    call.arguments = std::string(e == npos ? settled(text.substr(std::min(s, text.size())), kMarker, final)
                                           : text.substr(s, e - s));
    v.calls.push_back(std::move(call));
    if (e == npos) return v;
    p = skip_ws(text, e);
    if (text.substr(p, kMarker.size()) != kMarker) return v;
    p += kMarker.size();
  }
}

// A Python literal (str, int, float, True/False/None, list, tuple, dict) as JSON; nullopt if not one.
std::optional<ojson> python_literal(std::string_view s, size_t& p) {
  p = skip_ws(s, p);
  if (p >= s.size()) return std::nullopt;
  const char c = s[p];
  if (c == '\'' || c == '"') {
    std::string out;
    for (size_t i = p + 1; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 1 < s.size()) {
        const char e = s[++i];
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      } else if (s[i] == c) {
        p = i + 1;
        return ojson(out);
      } else {
        out += s[i];
      }
    }
    return std::nullopt;
  }
  if (c == '[' || c == '(' || c == '{') {
    const char close = c == '[' ? ']' : c == '(' ? ')' : '}';
    ojson out = c == '{' ? ojson::object() : ojson::array();
    ++p;
    while (true) {
      p = skip_ws(s, p);
      if (p < s.size() && s[p] == close) {
        ++p;
        return out;
      }
      std::optional<ojson> item = python_literal(s, p);
      if (!item) return std::nullopt;
      if (c == '{') {
        p = skip_ws(s, p);
        if (p >= s.size() || s[p] != ':' || !item->is_string()) return std::nullopt;
        std::optional<ojson> value = python_literal(s, ++p);
        if (!value) return std::nullopt;
        out[item->get<std::string>()] = *value;
      } else {
        out.push_back(*item);
      }
      p = skip_ws(s, p);
      if (p < s.size() && s[p] == ',') ++p;
    }
  }
  size_t e = p;
  while (e < s.size() && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '.' || s[e] == '-' ||
                          s[e] == '+' || s[e] == '_')) {
    ++e;
  }
  const std::string word(s.substr(p, e - p));
  p = e;
  if (word == "True") return ojson(true);
  if (word == "False") return ojson(false);
  if (word == "None") return ojson(nullptr);
  ojson num = ojson::parse(word, nullptr, false);
  if (num.is_number()) return num;
  return std::nullopt;
}

// [f(a=1, b="x"), g()]: parsed once the list is complete.
std::optional<std::vector<ToolCallView>> python_calls(std::string_view s) {
  std::vector<ToolCallView> calls;
  size_t p = skip_ws(s, 1);
  while (p < s.size() && s[p] != ']') {
    size_t open = s.find('(', p);
    if (open == npos) return std::nullopt;
    ToolCallView call;
    call.name = std::string(s.substr(p, open - p));
    for (char ch : call.name) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '.' && ch != '-') return std::nullopt;
    }
    ojson args = ojson::object();
    p = skip_ws(s, open + 1);
    while (p < s.size() && s[p] != ')') {
      const size_t eq = s.find('=', p);
      if (eq == npos) return std::nullopt;
      std::string key(s.substr(p, eq - p));
      while (!key.empty() && is_ws(key.back())) key.pop_back();
      size_t q = eq + 1;
      std::optional<ojson> value = python_literal(s, q);
      if (!value || key.empty()) return std::nullopt;
      args[key] = *value;
      p = skip_ws(s, q);
      if (p < s.size() && s[p] == ',') p = skip_ws(s, p + 1);
    }
    if (p >= s.size()) return std::nullopt;
    call.arguments = args.dump();
    calls.push_back(std::move(call));
    p = skip_ws(s, p + 1);
    if (p < s.size() && s[p] == ',') p = skip_ws(s, p + 1);
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// Llama 3.2 / Llama 4 pythonic: the whole output is [f(a=1), ...] (optionally in
// <|python_start|>...<|python_end|>), or it is content.
OutputView read_pythonic(std::string_view text, bool final) {
  OutputView v;
  size_t p = 0;
  const std::optional<bool> calls = opens_calls(text, "<|python_start|>", '[', final, &p);
  if (!calls) return v;
  if (*calls) {
    size_t depth = 0, end = npos;
    for (size_t i = p; i < text.size() && end == npos; ++i) {
      if (text[i] == '"' || text[i] == '\'') {
        i = string_end(text, i, text[i]);
        if (i == npos) break;
        --i;
      } else if (text[i] == '[' || text[i] == '(' || text[i] == '{') {
        ++depth;
      } else if ((text[i] == ']' || text[i] == ')' || text[i] == '}') && --depth == 0) {
        end = i + 1;
      }
    }
    if (end == npos && !final) return v;
    if (end != npos) {
      if (std::optional<std::vector<ToolCallView>> parsed = python_calls(text.substr(p, end - p))) {
        v.calls = std::move(*parsed);
        std::string_view rest = text.substr(end);
        if (rest.substr(0, 14) == "<|python_end|>") rest.remove_prefix(14);
        add_between(v.content, rest, final);
        return v;
      }
    }
  }
  v.content = text;
  return v;
}

// A Qwen3-Coder parameter value as JSON, by the type the tool's schema gives it.
std::string coder_value(const ojson& tools, const std::string& fn, const std::string& param, std::string value) {
  if (!value.empty() && value.front() == '\n') value.erase(0, 1);
  if (!value.empty() && value.back() == '\n') value.pop_back();
  std::string type;
  if (tools.is_array()) {
    for (const ojson& t : tools) {
      const ojson& f = t.value("function", ojson::object());
      if (!f.is_object() || f.value("name", "") != fn) continue;
      const ojson props = f.value("parameters", ojson::object()).value("properties", ojson::object());
      if (props.is_object() && props.contains(param) && props[param].is_object()) {
        type = props[param].value("type", "");
      }
    }
  }
  if (type == "integer" || type == "number" || type == "boolean" || type == "object" || type == "array" ||
      type == "null") {
    ojson j = ojson::parse(type == "boolean" ? std::string(value == "True" ? "true" : value == "False" ? "false" : value)
                                             : value,
                           nullptr, false);
    if (!j.is_discarded()) return j.dump();
  }
  return ojson(value).dump();
}

// Qwen3-Coder: <tool_call><function=NAME><parameter=P>value</parameter>...</function></tool_call>;
// arguments grow by one complete parameter at a time: `{"P": v`, `, "Q": w`, then `}`.
OutputView read_qwen3_coder(std::string_view text, bool final, const ojson& tools) {
  static constexpr std::string_view kClose = "</tool_call>", kFn = "<function=", kParam = "<parameter=",
                                    kParamEnd = "</parameter>", kFnEnd = "</function>";
  OutputView v;
  size_t pos = 0;
  bool after_call = false;
  while (true) {
    const size_t open = text_before_block(text, pos, after_call, final, v.content);
    if (open == npos) return v;
    const size_t close = text.find(kClose, open);
    const std::string_view block = text.substr(open, close == npos ? npos : close - open);
    const size_t fn = block.find(kFn);
    const size_t fn_end = fn == npos ? npos : block.find('>', fn);
    if (fn_end == npos) {
      if (close != npos || final) v.content += text.substr(open, close == npos ? npos : close + kClose.size() - open);
      if (close == npos) return v;
      pos = close + kClose.size();
      continue;
    }
    ToolCallView call;
    call.name = std::string(block.substr(fn + kFn.size(), fn_end - fn - kFn.size()));
    call.arguments = "{";
    size_t p = fn_end + 1;
    int params = 0;
    while (true) {
      const size_t ps = block.find(kParam, p);
      const size_t fe = block.find(kFnEnd, p);
      if (ps == npos || (fe != npos && fe < ps)) break;
      const size_t name_end = block.find('>', ps);
      const size_t pe = name_end == npos ? npos : block.find(kParamEnd, name_end);
      if (pe == npos) break;
      const std::string param(block.substr(ps + kParam.size(), name_end - ps - kParam.size()));
      call.arguments += str(params++ > 0 ? ", " : "", ojson(param).dump(), ": ",
                            coder_value(tools, call.name, param, std::string(block.substr(name_end + 1, pe - name_end - 1))));
      p = pe + kParamEnd.size();
    }
    if (block.find(kFnEnd, p) != npos || close != npos || final) call.arguments += "}";
    v.calls.push_back(std::move(call));
    after_call = true;
    if (close == npos) return v;
    pos = close + kClose.size();
  }
}

OutputView read_tools(const OutputFormats& f, std::string_view text, bool final) {
  switch (f.tools) {
    case ToolFormat::kHermes: return read_hermes(text, final);
    case ToolFormat::kLlama3Json: return read_llama3_json(text, final);
    case ToolFormat::kMistral: return read_mistral(text, final);
    case ToolFormat::kQwen3Coder: return read_qwen3_coder(text, final, f.tool_defs);
    case ToolFormat::kPythonic: return read_pythonic(text, final);
    case ToolFormat::kNone: break;
  }
  OutputView v;
  v.content = text;
  return v;
}

}  // namespace

OutputView read_output(const OutputFormats& f, std::string_view text, bool final) {
  static constexpr std::string_view kThink = "<think>", kEndThink = "</think>";
  std::string reasoning;
  std::string_view rest = text;
  if (f.reasoning != ReasoningFormat::kNone) {
    // Qwen3 opens its reasoning with <think>; DeepSeek-R1's template puts <think> in the prompt, so
    // its output starts inside the reasoning (a leading <think> is skipped).
    const size_t p = skip_ws(text, 0);
    const std::string_view head = text.substr(p);
    bool inside = f.reasoning == ReasoningFormat::kDeepSeekR1;
    if (head.substr(0, kThink.size()) == kThink) {
      inside = true;
      rest = head.substr(kThink.size());
    } else if (!final && kThink.substr(0, head.size()) == head) {
      return {};  // may still become <think>
    }
    if (inside) {
      const size_t end = rest.find(kEndThink);
      reasoning = std::string(end == npos ? settled(rest, kEndThink, final) : rest.substr(0, end));
      if (end == npos) return {reasoning, "", {}};
      rest = rest.substr(end + kEndThink.size());
    }
  }
  OutputView v = read_tools(f, rest, final);
  v.reasoning = std::move(reasoning);
  return v;
}

OutputDelta OutputParser::feed(std::string_view text) {
  text_ += text;
  return advance(false);
}

OutputDelta OutputParser::finish() { return advance(true); }

OutputDelta OutputParser::advance(bool final) {
  const OutputView next = read_output(formats_, text_, final);
  OutputDelta d;
  // Each view extends the last (read_output holds back whatever is not certain); a field that
  // would not (a bug) gives no delta rather than a garbled one.
  auto grow = [](std::string& have, const std::string& now, std::string* out) {
    if (now.size() > have.size() && now.compare(0, have.size(), have) == 0) {
      *out = now.substr(have.size());
      have = now;
    }
  };
  grow(emitted_.reasoning, next.reasoning, &d.reasoning);
  grow(emitted_.content, next.content, &d.content);
  for (size_t i = 0; i < next.calls.size(); ++i) {
    ToolCallDelta cd;
    cd.index = static_cast<int>(i);
    if (i >= emitted_.calls.size()) {
      emitted_.calls.push_back({next.calls[i].name, ""});
      ids_.push_back(new_request_id("call_"));
      cd.id = ids_.back();
      cd.name = next.calls[i].name;
    }
    grow(emitted_.calls[i].arguments, next.calls[i].arguments, &cd.arguments);
    if (!cd.id.empty() || !cd.arguments.empty()) d.calls.push_back(std::move(cd));
  }
  return d;
}

StatusOr<ToolFormat> tool_format_from_name(std::string_view name, std::string_view chat_template) {
  if (name == "auto") return detect_tool_format(chat_template);
  for (ToolFormat f : {ToolFormat::kNone, ToolFormat::kHermes, ToolFormat::kLlama3Json, ToolFormat::kMistral,
                       ToolFormat::kQwen3Coder, ToolFormat::kPythonic}) {
    if (name == tool_format_name(f)) return f;
  }
  return invalid_argument(str("unknown tool call parser '", name,
                              "' (auto, none, hermes, llama3_json, mistral, qwen3_coder, pythonic)"));
}

ToolFormat detect_tool_format(std::string_view t) {
  const auto has = [&](std::string_view s) { return t.find(s) != npos; };
  if (has("<tool_call>") && has("<function=") && has("<parameter=")) return ToolFormat::kQwen3Coder;
  if (has("<tool_call>")) return ToolFormat::kHermes;
  if (has("[TOOL_CALLS]")) return ToolFormat::kMistral;
  if (has("<|python_start|>")) return ToolFormat::kPythonic;
  if (has("<|start_header_id|>") && (has("<|python_tag|>") || has("\"parameters\""))) return ToolFormat::kLlama3Json;
  return ToolFormat::kNone;
}

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::kNone: return "none";
    case ToolFormat::kHermes: return "hermes";
    case ToolFormat::kLlama3Json: return "llama3_json";
    case ToolFormat::kMistral: return "mistral";
    case ToolFormat::kQwen3Coder: return "qwen3_coder";
    case ToolFormat::kPythonic: return "pythonic";
  }
  return "none";
}

StatusOr<ReasoningFormat> reasoning_format_from_name(std::string_view name) {
  if (name.empty() || name == "none") return ReasoningFormat::kNone;
  if (name == "qwen3") return ReasoningFormat::kQwen3;
  if (name == "deepseek-r1" || name == "deepseek_r1") return ReasoningFormat::kDeepSeekR1;
  return invalid_argument(str("unknown reasoning parser '", name, "' (none, qwen3, deepseek-r1)"));
}

}  // namespace rlm
