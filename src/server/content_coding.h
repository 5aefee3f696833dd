// Request body Content-Encoding: gzip and deflate are inflated with a cap on the output (a small
// compressed body cannot expand past the body limit); other codings are refused (415).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace rlm {

enum class ContentCoding { kIdentity, kGzip, kDeflate };

// The coding named by a Content-Encoding header value ("", "identity", "gzip", "x-gzip",
// "deflate"); nullopt for any other value, including lists of several codings.
std::optional<ContentCoding> parse_content_coding(std::string_view value);

// Decodes `in`. kInvalidArgument when the data is corrupt or truncated; kResourceExhausted when the
// output would exceed `max_out` bytes (decoding stops there).
StatusOr<std::string> decode_content(ContentCoding coding, std::string_view in, int64_t max_out);

}  // namespace rlm
