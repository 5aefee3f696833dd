// `radixlm bench attention` (the program: bench/attention.h).
#include "bench/attention.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"

namespace rlm::cli {

void add_bench_attention_command(CLI::App& bench, std::vector<std::pair<CLI::App*, Runner>>& out) {
  auto a = std::make_shared<bench::AttentionArgs>();
  CLI::App* s = bench.add_subcommand("attention", "CUDA paged-attention kernels: decode GB/s vs copy, prefill TFLOP/s");
  s->add_option("--decode-batch", a->decode_batch, "Decode requests")->check(CLI::PositiveNumber);
  s->add_option("--decode-len", a->decode_len, "Keys per decode request")->check(CLI::PositiveNumber);
  s->add_option("--decode-batches", a->decode_batches, "Several decode batch sizes (list; overrides --decode-batch)")
      ->delimiter(',');
  s->add_option(
       "--decode-splits", a->decode_splits,
       "Split counts to time per batch (list; 0: the kernel's own choice; default 0,1,2,3,4,8,16,32 and the "
       "engine's)")
      ->delimiter(',')
      ->check(CLI::Range(0, 64));
  s->add_flag("--decode-only", a->decode_only, "Only the decode runs (no prefill, no cascade)");
  s->add_option("--prefill-lens", a->prefill_lens, "Prompt lengths of the causal prefill runs")->delimiter(',');
  s->add_option("--prefill-tokens", a->prefill_tokens, "Tokens per prefill batch (batch = this / len, at least 1)")
      ->check(CLI::PositiveNumber);
  s->add_option("--num-qo-heads", a->num_qo_heads, "Query heads")->check(CLI::PositiveNumber);
  s->add_option("--num-kv-heads", a->num_kv_heads, "KV heads")->check(CLI::PositiveNumber);
  s->add_option("--head-dim", a->head_dim, "a multiple of 16 up to 256 (64, 128, 256: the tuned kernels)");
  add_page_size_flag(s, a->page_size);
  s->add_option("--dtype", a->dtype, "Cache dtype: bf16 (default), f16, f32, fp8_e4m3");
  s->add_option("--iters", a->iters, "Timed runs per measurement (median)")->check(CLI::PositiveNumber);
  s->add_option("--json", a->json_path, "Write the numbers to this JSON file");
  s->add_option("--cascade-batch", a->cascade_batch, "Cascade runs: requests sharing the prefix")
      ->check(CLI::PositiveNumber);
  s->add_option("--cascade-prefix", a->cascade_prefix, "Cascade runs: shared prefix tokens")->check(CLI::PositiveNumber);
  s->add_option("--cascade-new", a->cascade_new, "Cascade runs: new tokens per request (list)")->delimiter(',');
  out.emplace_back(s, [a] { return bench::run_attention(*a); });
}

}  // namespace rlm::cli
