// Where model weights come from: safetensors files (mmap), GGUF files (kept quantized, or
// dequantized at load), or random values of the right shapes (--load-format dummy). Models ask
// for each tensor by its Hugging Face name together with the shape they expect; sources check it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace rlm {

class Communicator;

// This process's place in a tensor-parallel group: which shard of every split weight it loads,
// and the communicator its model's forward reduces and gathers through (model/tensor_parallel.h).
// size 1: the whole model, no communicator.
struct TpShard {
  int rank = 0;
  int size = 1;
  Communicator* comm = nullptr;  // not owned; set when size > 1
  bool active() const { return size > 1; }
};

// How load_linear (model/layers.h) stores the projections it loads, and whether models read
// FP8 KV-cache scales; load_model sets it.
struct WeightLoadOptions {
  // Float (f32/bf16/f16) projections are quantized to f8e4m3 with one scale per output channel
  // (`--quantization fp8`). Projections stored as f8e4m3 in the checkpoint load as they are.
  bool quantize_fp8 = false;
  // Block size of `weight_scale_inv` block scales (quantization_config.weight_block_size).
  int64_t fp8_block_n = 128;
  int64_t fp8_block_k = 128;
  // Per-layer k/v scales of an FP8 KV cache (`self_attn.k_scale`, ...) are read when present
  // (checkpoints only: a dummy source "has" every name).
  bool read_kv_scales = false;
  // Tensor parallelism: the models load their shard through model/tensor_parallel.h.
  TpShard tp;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  WeightLoadOptions load_options;
  virtual bool has(const std::string& name) const = 0;
  // The tensor `name` on the CPU in its stored dtype (f32/bf16/f16/f8e4m3; may be a view into an
  // mmap; GGUF sources opened with GgufWeights::kQuantized serve matrices in their block dtypes).
  // Fails with kNotFound naming the tensor and the file when it is missing and with
  // kInvalidArgument when its shape differs from `expected_shape`.
  virtual StatusOr<Tensor> get(const std::string& name, const Shape& expected_shape) = 0;
  virtual std::vector<std::string> names() const = 0;
  // True for a source that makes up any tensor asked for (dummy weights): has() then says nothing
  // about what a checkpoint stores (a tied model keeps its tied LM head).
  virtual bool synthesizes_any_name() const { return false; }
  // A short description for messages ("safetensors: /path (3 files)").
  virtual std::string describe() const = 0;
};

// Opens a Hugging Face model directory: model.safetensors, a sharded checkpoint described by
// model.safetensors.index.json, or failing those every *.safetensors file in the directory.
StatusOr<std::unique_ptr<WeightSource>> open_safetensors(const std::string& model_dir);

// Random weights of whatever shape is asked for (for benchmarks): values ~ U(-scale, scale),
// deterministic in (seed, name). `dtype` is the dtype of the returned tensors; with
// `matrix_dtype` (a block-quantized dtype, --dummy-weight-type), every matrix whose rows are a
// whole number of its blocks is random blocks of that type instead (values within ~+-scale).
std::unique_ptr<WeightSource> make_dummy_weights(DType dtype, uint64_t seed, float scale = 0.02f,
                                                 std::optional<DType> matrix_dtype = std::nullopt);

}  // namespace rlm
