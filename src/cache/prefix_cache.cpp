#include "cache/prefix_cache.h"

#include <string>

#include "cache/naive_cache.h"
#include "cache/radix_cache.h"

namespace rlm {

StatusOr<std::unique_ptr<PrefixCache>> make_prefix_cache(std::string_view kind, int32_t page_size) {
  if (page_size < 1) return invalid_argument(str("page size must be >= 1, got ", page_size));
  if (kind == "radix") return std::unique_ptr<PrefixCache>(std::make_unique<RadixCache>(page_size));
  if (kind == "naive") return std::unique_ptr<PrefixCache>(std::make_unique<NaiveCache>(page_size));
  return invalid_argument(str("unknown prefix cache '", kind, "' (expected radix or naive)"));
}

}  // namespace rlm
