// API key checks: "Authorization: Bearer KEY" with the scheme matched case-insensitively (RFC
// 7235) and the key compared in constant time, so response timing does not reveal how much of a
// guess was right.
#pragma once

#include <optional>
#include <string_view>

namespace rlm {

// Equality whose running time depends only on `given`'s length, not on where it differs from
// `secret`.
bool constant_time_equals(std::string_view given, std::string_view secret);

// True when `authorization` (the header's value, nullopt if absent) is "<bearer> <key>".
bool bearer_matches(std::optional<std::string_view> authorization, std::string_view key);

}  // namespace rlm
