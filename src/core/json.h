// JSON that comes from outside the process (HTTP request bodies, model and tokenizer files,
// safetensors headers, prompt files) is parsed only through parse_json, which enforces a size
// limit and a nesting-depth limit before any recursive work: a linear, non-recursive scan over
// the text counts the nesting of arrays and objects outside strings and rejects the text at the
// first byte past the limit, so hostile input (e.g. 100,000 nested '[') can exhaust neither the
// stack nor memory. Every value parse_json returns nests at most `max_depth` levels, which
// bounds the recursion of everything done with it afterwards (copies, dump(), jinja's
// from_json, comparisons).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace rlm {

struct JsonLimits {
  int max_depth = 0;      // arrays/objects nested at most this deep ("[]" is 1, "[[]]" is 2)
  size_t max_bytes = 0;   // the text's length
};

// HTTP request bodies. 128 levels leave room for JSON schemas in `tools` and `response_format`
// (each schema level adds two: "properties" and the property's schema, so ~60 schema levels);
// 64 MiB is the HTTP body limit of the server.
inline constexpr JsonLimits kRequestJsonLimits{128, size_t{64} << 20};
// Model directories and prompt files (config.json, tokenizer.json, tokenizer_config.json, the
// safetensors index, prompts files, bench datasets): real files nest fewer than 20 levels;
// tokenizer.json files reach ~35 MB.
inline constexpr JsonLimits kFileJsonLimits{512, size_t{1} << 30};

// The deepest nesting of arrays/objects in `text`, counted outside strings, scanning at most
// until it exceeds `stop_above` (then returns stop_above + 1). Linear time, constant memory; an
// upper bound of what a JSON parser reaches on the same text, valid or not.
int json_nesting_depth(std::string_view text, int stop_above);

// Checks the limits, then parses. kInvalidArgument naming the limit ("JSON nests deeper than
// 128 levels", "JSON text of N bytes exceeds the limit of M bytes") or the parse error ("not
// valid JSON: ..."); callers prefix what was parsed.
StatusOr<nlohmann::json> parse_json(std::string_view text, const JsonLimits& limits);
StatusOr<nlohmann::ordered_json> parse_ordered_json(std::string_view text, const JsonLimits& limits);

// Reads and parses a file with kFileJsonLimits-style limits. kNotFound when it cannot be opened;
// errors name the path.
StatusOr<nlohmann::json> read_json_file(const std::string& path, const JsonLimits& limits = kFileJsonLimits);

}  // namespace rlm
