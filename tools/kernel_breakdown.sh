#!/usr/bin/env bash
# Where a decode step's time goes, kernel by kernel: runs `radixlm bench one-batch` eagerly
# (--disable-cuda-graph, so every kernel is its own launch) under Nsight Compute, which times each
# kernel with the clocks left alone (`--clock-control none`), and prints one row per kernel name:
# launches per step, microseconds per step and share of the step, over STEPS decode steps (all but
# the first of `bench one-batch`'s eager pass). PHASE=prefill does the same for the prefill steps
# of BS x INPUT prompt tokens in steps of PREFILL_TOKENS (default 8192; BS x INPUT a multiple of it,
# so that the steps are alike): every step but the first (`bench one-batch --profile-prefill`).
#
# Usage on a GPU machine (after a CUDA build, e.g. tools/gpu_check.sh):
#   RLM=build-gpu/radixlm MODEL=configs/llama-3.1-8b BS=1 OUT=/some/dir bash tools/kernel_breakdown.sh
#   BS (batch size, default 1), INPUT (prompt length, default 512), STEPS (decode steps summed, default 3),
#   EXTRA (more one-batch flags, e.g. "--quantization fp8 --kv-cache-dtype fp8_e4m3");
#   PHASE=prefill (BS defaults to 24 and INPUT to 1024 then: three steps of 8192 tokens, the last two
#   profiled), PREFILL_TOKENS.
# Output: $OUT/kernels_b$BS.txt (PHASE=prefill: kernels_prefill_b$BS.txt; the table) and the raw CSV
# beside it. The sum of kernel times is the
# GPU's busy time in a step; `bench one-batch` without ncu gives the step's wall time (with CUDA
# graphs), so the difference is what launches and gaps cost.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RLM=${RLM:-$ROOT/build-gpu/radixlm}
MODEL=${MODEL:-$ROOT/configs/llama-3.1-8b}
PHASE=${PHASE:-decode}
case "$PHASE" in decode | prefill) ;; *) echo "kernel_breakdown: PHASE is decode or prefill, not '$PHASE'"; exit 2 ;; esac
if [ "$PHASE" = prefill ]; then
  BS=${BS:-24}
  INPUT=${INPUT:-1024}
else
  BS=${BS:-1}
  INPUT=${INPUT:-512}
fi
STEPS=${STEPS:-3}
EXTRA=${EXTRA:-}
PREFILL_TOKENS=${PREFILL_TOKENS:-8192}
OUT=${OUT:-$ROOT/out/kernel_breakdown}
NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)}
mkdir -p "$OUT"
[ -n "$NCU" ] && [ -x "$NCU" ] || { echo "kernel_breakdown: ncu not found (set NCU=)"; exit 1; }

if [ "$PHASE" = prefill ]; then
  # One prefill of BS x INPUT tokens in steps of PREFILL_TOKENS and one output token; one-batch opens
  # the profiler's range before the second step and closes it after the last.
  tokens=$(( BS * INPUT ))
  [ $(( tokens % PREFILL_TOKENS )) -eq 0 ] && [ "$tokens" -gt "$PREFILL_TOKENS" ] ||
    { echo "kernel_breakdown: BS x INPUT ($tokens) must be a multiple of PREFILL_TOKENS ($PREFILL_TOKENS), two steps or more"; exit 2; }
  STEPS=$(( tokens / PREFILL_TOKENS - 1 ))
  run_flags=(--output-len 1 --max-prefill-tokens "$PREFILL_TOKENS" --profile-prefill)
  tag=prefill_b$BS
else
  # One run with 2 + STEPS output tokens: a prefill, then 1 + STEPS decode steps; one-batch opens the
  # profiler's range after the first decode step and closes it after the last (--profile-from-start off).
  run_flags=(--output-len $(( 2 + STEPS )))
  tag=b$BS
fi
csv="$OUT/kernels_$tag.csv"
# shellcheck disable=SC2086
"$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv "$RLM" bench one-batch --model "$MODEL" \
  --load-format dummy --device cuda --batch-size "$BS" --input-len "$INPUT" "${run_flags[@]}" \
  --disable-cuda-graph $EXTRA 2> "$OUT/ncu_$tag.err" | grep '^"' > "$csv"
python3 "$ROOT/tools/kernel_breakdown.py" "$csv" "$STEPS" "$BS" "$PHASE" | tee "$OUT/kernels_$tag.txt"
