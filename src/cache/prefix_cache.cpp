#include "cache/prefix_cache.h"

#include <string>

#include "cache/hybrid_radix_cache.h"
#include "cache/naive_cache.h"
#include "cache/radix_cache.h"

namespace rlm {

StatusOr<std::unique_ptr<PrefixCache>> make_prefix_cache(std::string_view kind, int32_t page_size,
                                                         int32_t mamba_chunk, MambaSlotRelease release_mamba) {
  if (page_size < 1) return invalid_argument(str("page size must be >= 1, got ", page_size));
  if (mamba_chunk < 0) return invalid_argument(str("mamba chunk size must be >= 0, got ", mamba_chunk));
  if (mamba_chunk > 0 && kind == "radix") {
    if (!release_mamba) return invalid_argument("a hybrid radix cache needs a callback that frees snapshot slots");
    return std::unique_ptr<PrefixCache>(
        std::make_unique<HybridRadixCache>(page_size, mamba_chunk, std::move(release_mamba)));
  }
  if (kind == "radix") return std::unique_ptr<PrefixCache>(std::make_unique<RadixCache>(page_size));
  if (kind == "naive") return std::unique_ptr<PrefixCache>(std::make_unique<NaiveCache>(page_size));
  return invalid_argument(str("unknown prefix cache '", kind, "' (expected radix or naive)"));
}

}  // namespace rlm
