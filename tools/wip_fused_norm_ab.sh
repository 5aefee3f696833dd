#!/usr/bin/env bash
# Branch fp8-norm-quant (not main until measured): one device call that checks the RMSNorm with
# the FP8 activation quantization folded in (fp8_cuda_test; greedy tokens of the FP8 fixtures)
# and times the FP8 decode step with and without it (RADIXLM_FP8_FUSED_NORM=0), rounds
# interleaved. Two ways to run it:
#   built on the device: carry .gpu_deps.tar.xz and third_party/xgrammar, run it as is (~200 s of
#     build first);
#   prebuilt here (cheaper in device time): cmake --build build --target radixlm fp8_cuda_test &&
#     BINS="radixlm fp8_cuda_test" BUILD=build bash tools/gpu_pack.sh, then carry .gpu_carry.tar.xz
#     and tests/data/tokenizer/generated/llama3 and run with PREBUILT=1.
# Either way keep tests/data/fp8 (~5 MB) in the tree when moving other test data out to fit the
# 64 MiB limit.
# Writes under $OUT/x.
set -uo pipefail
R=$OUT/x; mkdir -p $R
if [ "${PREBUILT:-0}" = 1 ]; then
  TESTS=none OUT=$R/m bash tools/gpu_run_prebuilt.sh > /dev/null 2>&1
  export LD_LIBRARY_PATH=/tmp/rlm/deps:/usr/local/cuda/lib64:/usr/local/cuda/lib
  BIN=/tmp/rlm/bin
else
  OUT=$R/check SKIP_CTEST=1 SKIP_TESTS=1 BENCH=0 BUILD_TIMEOUT=300 TARGETS="radixlm fp8_cuda_test" \
    bash tools/gpu_check.sh > $R/check.log 2>&1
  tail -1 $R/check.log
  export LD_LIBRARY_PATH=/tmp/rlmdeps/usr/lib/x86_64-linux-gnu:/tmp/rlmdeps/usr/lib/x86_64-linux-gnu/openblas-pthread:/tmp/rlmdeps/lib/x86_64-linux-gnu
  BIN=build-gpu
fi
timeout 120 $BIN/fp8_cuda_test > $R/fp8t.log 2>&1
echo "fp8_cuda_test rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/fp8t.log | tr '\n' ' ')"
# Whole models: the FP8 fixtures (per-channel dynamic, per-tensor static: the folded path; 128 x 128
# blocks: the two steps) and an 8B-shape bf16 model quantized at load, greedy tokens fused vs not.
for m in tests/data/fp8/llama_ct_channel_dynamic tests/data/fp8/llama_ct_tensor_static tests/data/fp8/qwen3_fp8_block; do
  for v in 1 0; do
    RADIXLM_FP8_FUSED_NORM=$v timeout 120 $BIN/radixlm generate --device cuda --model $m --prompt-ids 1,2,3,4,5 \
      --prompt-ids 9,8,7 --max-tokens 24 --ignore-eos > $R/gen_$(basename $m)_$v.txt 2>&1
  done
  cmp -s $R/gen_$(basename $m)_1.txt $R/gen_$(basename $m)_0.txt && echo "generate $(basename $m): fused == unfused" \
    || echo "generate $(basename $m): DIFFER (gen_*.txt)"
done
RLM=$BIN/radixlm VARIANTS="fused: unfused:RADIXLM_FP8_FUSED_NORM=0" BATCHES="1 32 256" ROUNDS=2 \
  EXTRA="--quantization fp8 --kv-cache-dtype fp8_e4m3" OUT=$R/ab timeout 400 bash tools/decode_ab.sh 2>&1 | tail -8
cd $R && tar czf $OUT/logs.tgz --exclude=build.log .
