#include "cache/mamba_pool.h"

#include <algorithm>

namespace rlm {

MambaPool::MambaPool(const MambaShape& shape, int64_t num_slots, Device device)
    : shape_(shape), num_slots_(num_slots), device_(device), in_use_(num_slots, false) {
  RLM_CHECK(shape.num_layers > 0 && shape.conv_dim > 0 && shape.conv_width > 0 && shape.num_v_heads > 0 &&
            shape.head_k_dim > 0 && shape.head_v_dim > 0)
      << "bad mamba state shape: layers " << shape.num_layers << " conv_dim " << shape.conv_dim << " conv_width "
      << shape.conv_width << " v_heads " << shape.num_v_heads << " head_k_dim " << shape.head_k_dim
      << " head_v_dim " << shape.head_v_dim;
  RLM_CHECK(num_slots > 0) << "mamba pool needs at least one slot, got " << num_slots;
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    conv_.push_back(Tensor::zeros({num_slots, shape.conv_dim, shape.conv_width}, DType::kF32, device));
    ssm_.push_back(
        Tensor::zeros({num_slots, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim}, DType::kF32, device));
  }
  free_.reserve(num_slots);
  for (int64_t i = num_slots - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

const Tensor& MambaPool::conv_state(int64_t layer) const {
  RLM_CHECK(layer >= 0 && layer < shape_.num_layers) << "linear-attention layer " << layer;
  return conv_[layer];
}

const Tensor& MambaPool::ssm_state(int64_t layer) const {
  RLM_CHECK(layer >= 0 && layer < shape_.num_layers) << "linear-attention layer " << layer;
  return ssm_[layer];
}

size_t MambaPool::bytes_per_slot() const {
  const int64_t per_layer =
      shape_.conv_dim * shape_.conv_width + shape_.num_v_heads * shape_.head_k_dim * shape_.head_v_dim;
  return static_cast<size_t>(per_layer * shape_.num_layers) * sizeof(float);
}

int32_t MambaPool::alloc() {
  if (free_.empty()) return -1;
  const int32_t s = free_.back();
  free_.pop_back();
  in_use_[s] = true;
  return s;
}

void MambaPool::free(int32_t slot) {
  check_slot(slot, "free");
  in_use_[slot] = false;
  free_.push_back(slot);
}

bool MambaPool::in_use(int32_t slot) const { return slot >= 0 && slot < num_slots_ && in_use_[slot]; }

void MambaPool::check_slot(int32_t slot, const char* what) const {
  RLM_CHECK(slot >= 0 && slot < num_slots_) << "mamba " << what << ": slot " << slot << " outside [0, "
                                            << num_slots_ << ")";
  RLM_CHECK(in_use_[slot]) << "mamba " << what << ": slot " << slot << " is not allocated";
}

void MambaPool::adopt(int32_t slot) {
  RLM_CHECK(slot >= 0 && slot < num_slots_) << "state slot " << slot << " out of range";
  if (in_use_[slot]) return;
  in_use_[slot] = true;
  free_.erase(std::find(free_.begin(), free_.end(), slot));
}

void MambaPool::copy_slot(int32_t src, int32_t dst) {
  check_slot(src, "copy source");
  check_slot(dst, "copy destination");
  if (on_copy_) on_copy_(src, dst);
  if (src == dst) return;
  for (int64_t l = 0; l < shape_.num_layers; ++l) {
    conv_[l].select(0, dst).copy_(conv_[l].select(0, src));
    ssm_[l].select(0, dst).copy_(ssm_[l].select(0, src));
  }
}

void MambaPool::zero_slot(int32_t slot) {
  check_slot(slot, "zero");
  for (int64_t l = 0; l < shape_.num_layers; ++l) {
    for (const Tensor& t : {conv_[l].select(0, slot), ssm_[l].select(0, slot)}) {
      device_memset(t.data_ptr(), device_, 0, t.nbytes());  // contiguous: a row of a contiguous pool
    }
  }
}

}  // namespace rlm
