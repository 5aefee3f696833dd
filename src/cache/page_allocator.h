// PageAllocator: the free list of KV page ids. A page is page_size consecutive KV slots
// (slot = page * page_size + offset). The allocator only hands out ids; the KV pool owns the
// memory and the prefix cache / requests own the pages they were given until they free them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace rlm {

class PageAllocator {
 public:
  // All of [0, num_pages) start free. Requires num_pages >= 0.
  explicit PageAllocator(int32_t num_pages);

  // n pages, or nullopt when fewer than n are free; on failure the state is unchanged
  // (an expected condition: the caller evicts from the prefix cache or retracts a request).
  // Requires n >= 0; alloc(0) returns an empty vector.
  std::optional<std::vector<int32_t>> alloc(int32_t n);

  // Returns pages to the free list. Every id must be in range and currently allocated, with no
  // repeats within `pages`; otherwise RLM_CHECK throws before any page is freed (all or nothing).
  void free(std::span<const int32_t> pages);

  // Frees every page (for a cache flush when no request holds pages).
  void reset();

  int32_t num_free() const { return static_cast<int32_t>(free_list_.size()); }
  int32_t num_total() const { return num_pages_; }
  int32_t num_used() const { return num_pages_ - num_free(); }
  bool is_allocated(int32_t page) const;

  std::string to_string() const;

 private:
  int32_t num_pages_;
  std::vector<int32_t> free_list_;  // a stack; the lowest ids are handed out first after reset
  std::vector<uint8_t> allocated_;  // [num_pages] 1 when the page is handed out
};

// [num_pages * page_size] slot ids of the given pages, page by page: p*ps, p*ps+1, ..., p*ps+ps-1.
std::vector<int32_t> pages_to_slots(std::span<const int32_t> pages, int32_t page_size);

// [slots.size() / page_size] page ids of page-aligned slot runs: slots[i*ps] / ps. Requires
// slots.size() % page_size == 0 and each run to be one whole page in order (RLM_CHECK).
std::vector<int32_t> slots_to_pages(std::span<const int32_t> slots, int32_t page_size);

}  // namespace rlm
