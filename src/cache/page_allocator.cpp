#include "cache/page_allocator.h"

#include <sstream>

#include "core/check.h"

namespace rlm {

PageAllocator::PageAllocator(int32_t num_pages) : num_pages_(num_pages) {
  RLM_CHECK_GE(num_pages, 0) << "PageAllocator needs a non-negative page count";
  reset();
}

void PageAllocator::reset() {
  free_list_.resize(static_cast<size_t>(num_pages_));
  for (int32_t i = 0; i < num_pages_; ++i) free_list_[static_cast<size_t>(i)] = num_pages_ - 1 - i;
  allocated_.assign(static_cast<size_t>(num_pages_), 0);
}

std::optional<std::vector<int32_t>> PageAllocator::alloc(int32_t n) {
  RLM_CHECK_GE(n, 0) << "PageAllocator::alloc of a negative page count";
  if (n > num_free()) return std::nullopt;
  std::vector<int32_t> pages(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const int32_t page = free_list_.back();
    free_list_.pop_back();
    allocated_[static_cast<size_t>(page)] = 1;
    pages[static_cast<size_t>(i)] = page;
  }
  return pages;
}

void PageAllocator::free(std::span<const int32_t> pages) {
  // Validate everything first so that a bad call frees nothing.
  size_t i = 0;
  for (; i < pages.size(); ++i) {
    const int32_t page = pages[i];
    if (page < 0 || page >= num_pages_) break;
    if (allocated_[static_cast<size_t>(page)] != 1) break;
    allocated_[static_cast<size_t>(page)] = 2;  // mark: seen in this call
  }
  if (i != pages.size()) {
    for (size_t j = 0; j < i; ++j) allocated_[static_cast<size_t>(pages[j])] = 1;  // undo marks
    const int32_t page = pages[i];
    RLM_CHECK(page >= 0 && page < num_pages_)
        << "PageAllocator::free: page " << page << " out of range [0, " << num_pages_ << ")";
    RLM_FAIL() << "PageAllocator::free: page " << page
               << (allocated_[static_cast<size_t>(page)] == 0 ? " is not allocated (double free)"
                                                              : " appears twice in one free call");
  }
  for (const int32_t page : pages) {
    allocated_[static_cast<size_t>(page)] = 0;
    free_list_.push_back(page);
  }
}

bool PageAllocator::is_allocated(int32_t page) const {
  RLM_CHECK(page >= 0 && page < num_pages_)
      << "PageAllocator: page " << page << " out of range [0, " << num_pages_ << ")";
  return allocated_[static_cast<size_t>(page)] != 0;
}

std::string PageAllocator::to_string() const {
  std::ostringstream os;
  os << "PageAllocator(free=" << num_free() << "/" << num_pages_ << ")";
  return os.str();
}

std::vector<int32_t> pages_to_slots(std::span<const int32_t> pages, int32_t page_size) {
  RLM_CHECK_GE(page_size, 1);
  std::vector<int32_t> slots;
  slots.reserve(pages.size() * static_cast<size_t>(page_size));
  for (const int32_t page : pages) {
    RLM_CHECK_GE(page, 0) << "pages_to_slots: negative page id";
    for (int32_t j = 0; j < page_size; ++j) slots.push_back(page * page_size + j);
  }
  return slots;
}

std::vector<int32_t> slots_to_pages(std::span<const int32_t> slots, int32_t page_size) {
  RLM_CHECK_GE(page_size, 1);
  RLM_CHECK_EQ(slots.size() % static_cast<size_t>(page_size), 0u)
      << "slots_to_pages: slot count is not a multiple of page_size";
  std::vector<int32_t> pages;
  pages.reserve(slots.size() / static_cast<size_t>(page_size));
  for (size_t i = 0; i < slots.size(); i += static_cast<size_t>(page_size)) {
    const int32_t first = slots[i];
    RLM_CHECK(first >= 0 && first % page_size == 0)
        << "slots_to_pages: slot " << first << " at index " << i << " does not start a page";
    for (int32_t j = 1; j < page_size; ++j) {
      RLM_CHECK_EQ(slots[i + static_cast<size_t>(j)], first + j)
          << "slots_to_pages: slots at index " << i << " are not one whole page";
    }
    pages.push_back(first / page_size);
  }
  return pages;
}

}  // namespace rlm
