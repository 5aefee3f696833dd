#include "cache/kv_pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_set>

#ifdef RADIXLM_WITH_CUDA
#include "kernels/cuda/req_to_token.h"
#endif

namespace rlm {

KVPool::KVPool(const KVPoolConfig& config) : config_(config) {
  RLM_CHECK(config.num_layers > 0 && config.num_pages > 0 && config.page_size > 0 && config.num_kv_heads > 0 &&
            config.head_dim > 0 && config.v_head_dim >= 0)
      << "bad KV pool config: layers " << config.num_layers << " pages " << config.num_pages << " page_size "
      << config.page_size << " kv_heads " << config.num_kv_heads << " head_dim " << config.head_dim << " v_head_dim "
      << config.v_head_dim;
  RLM_CHECK(is_floating(config.dtype) || config.dtype == DType::kF8E4M3)
      << "KV pool dtype must be f32, bf16, f16 or f8e4m3, got " << dtype_name(config.dtype);
  scales_.assign(static_cast<size_t>(config.num_layers), KvScales{});
  const Shape k_shape{num_slots(), config.num_kv_heads, config.head_dim};
  const Shape v_shape{num_slots(), config.num_kv_heads, config.v_dim()};
  for (int64_t l = 0; l < config.num_layers; ++l) {
    k_.push_back(Tensor::zeros(k_shape, config.dtype, config.device));
    v_.push_back(Tensor::zeros(v_shape, config.dtype, config.device));
  }
}

const Tensor& KVPool::k_buffer(int64_t layer) const {
  RLM_CHECK(layer >= 0 && layer < config_.num_layers) << "layer " << layer;
  return k_[layer];
}

const Tensor& KVPool::v_buffer(int64_t layer) const {
  RLM_CHECK(layer >= 0 && layer < config_.num_layers) << "layer " << layer;
  return v_[layer];
}

const KvScales& KVPool::scales(int64_t layer) const {
  RLM_CHECK(layer >= 0 && layer < config_.num_layers) << "layer " << layer;
  return scales_[layer];
}

void KVPool::set_scales(const std::vector<KvScales>& scales) {
  RLM_CHECK_EQ(static_cast<int64_t>(scales.size()), config_.num_layers) << " KV scales, one per layer";
  for (size_t l = 0; l < scales.size(); ++l) {
    const KvScales& s = scales[l];
    RLM_CHECK(std::isfinite(s.k) && s.k > 0.0f && std::isfinite(s.v) && s.v > 0.0f)
        << "layer " << l << ": KV scales " << s.k << ", " << s.v << " must be positive and finite";
    RLM_CHECK(config_.dtype == DType::kF8E4M3 || (s.k == 1.0f && s.v == 1.0f))
        << "layer " << l << ": KV scales " << s.k << ", " << s.v << " need an f8e4m3 pool, this one is "
        << dtype_name(config_.dtype);
  }
  scales_ = scales;
}

size_t KVPool::bytes_per_token() const {
  return static_cast<size_t>(config_.num_layers * config_.num_kv_heads * (config_.head_dim + config_.v_dim())) *
         dtype_size(config_.dtype);
}

ReqToTokenPool::ReqToTokenPool(int64_t max_requests, int64_t max_context_len, Device device)
    : table_(Tensor::zeros({max_requests, max_context_len}, DType::kI32)), device_(device),
      in_use_(max_requests, false) {
  if (device.is_cuda()) device_table_ = Tensor::zeros({max_requests, max_context_len}, DType::kI32, device);
  free_.reserve(max_requests);
  for (int64_t i = max_requests - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

int32_t ReqToTokenPool::alloc() {
  if (free_.empty()) return -1;
  int32_t s = free_.back();
  free_.pop_back();
  in_use_[s] = true;
  return s;
}

void ReqToTokenPool::adopt(int32_t req_slot) {
  RLM_CHECK(req_slot >= 0 && req_slot < max_requests()) << "request slot " << req_slot << " out of range";
  if (in_use_[req_slot]) return;
  in_use_[req_slot] = true;
  free_.erase(std::find(free_.begin(), free_.end(), req_slot));
}

void ReqToTokenPool::free(int32_t req_slot) {
  RLM_CHECK(req_slot >= 0 && req_slot < max_requests()) << "request slot " << req_slot << " out of range";
  RLM_CHECK(in_use_[req_slot]) << "double free of request slot " << req_slot;
  in_use_[req_slot] = false;
  free_.push_back(req_slot);
}

void ReqToTokenPool::write(int32_t req_slot, int64_t start, const std::vector<int32_t>& slots) {
  RLM_CHECK(req_slot >= 0 && req_slot < max_requests() && in_use_[req_slot]) << "request slot " << req_slot;
  RLM_CHECK(start >= 0 && start + static_cast<int64_t>(slots.size()) <= max_context_len())
      << "positions [" << start << ", " << start + static_cast<int64_t>(slots.size())
      << ") exceed the context length " << max_context_len();
  if (slots.empty()) return;
  if (slot_limit_ > 0) {
    for (size_t i = 0; i < slots.size(); ++i) {
      RLM_CHECK(slots[i] >= 0 && slots[i] < slot_limit_)
          << "request slot " << req_slot << " position " << start + static_cast<int64_t>(i) << ": KV slot "
          << slots[i] << " is outside the pool [0, " << slot_limit_ << ")";
    }
  }
  const int64_t base = req_slot * max_context_len() + start;
  std::memcpy(table_.data<int32_t>() + base, slots.data(), slots.size() * 4);
  if (device_.is_cuda()) {
    for (size_t i = 0; i < slots.size(); ++i) {
      pending_.push_back(base + static_cast<int64_t>(i));
      pending_.push_back(slots[i]);
    }
  }
}

void ReqToTokenPool::sync_device() {
  if (pending_.empty()) return;
#ifdef RADIXLM_WITH_CUDA
  // The last write of an entry wins: drop earlier writes of the same entry (the scatter is parallel).
  std::unordered_set<int64_t> seen;
  std::vector<int64_t> unique;
  unique.reserve(pending_.size());
  for (size_t i = pending_.size(); i >= 2; i -= 2) {
    if (seen.insert(pending_[i - 2]).second) {
      unique.push_back(pending_[i - 2]);
      unique.push_back(pending_[i - 1]);
    }
  }
  pending_.clear();
  const Tensor entries = Tensor::from_vector(unique).to(device_);  // one upload per step
  const int64_t limit = slot_limit_ > 0 ? slot_limit_ : std::numeric_limits<int32_t>::max();
  cuda::scatter_req_to_token(device_.index, device_table_.data<int32_t>(), device_table_.numel(),
                             entries.data<int64_t>(), static_cast<int64_t>(unique.size() / 2), limit);
#else
  fail("ReqToTokenPool::sync_device: radixlm was built without CUDA");
#endif
}

std::vector<int32_t> ReqToTokenPool::read(int32_t req_slot, int64_t start, int64_t end) const {
  RLM_CHECK(req_slot >= 0 && req_slot < max_requests()) << "request slot " << req_slot;
  RLM_CHECK(0 <= start && start <= end && end <= max_context_len()) << "positions [" << start << ", " << end << ")";
  const int32_t* row = table_.data<int32_t>() + req_slot * max_context_len();
  return std::vector<int32_t>(row + start, row + end);
}

}  // namespace rlm
