#!/usr/bin/env bash
# Where a decode step's time goes, kernel by kernel: runs `radixlm bench one-batch` eagerly
# (--disable-cuda-graph, so every kernel is its own launch) under Nsight Compute, which times each
# kernel with the clocks left alone (`--clock-control none`), and prints one row per kernel name:
# launches per step, microseconds per step and share of the step, over STEPS decode steps (all but
# the first of `bench one-batch`'s eager pass).
#
# Usage on a GPU machine (after a CUDA build, e.g. tools/gpu_check.sh):
#   RLM=build-gpu/radixlm MODEL=configs/llama-3.1-8b BS=1 OUT=/some/dir bash tools/kernel_breakdown.sh
#   BS (batch size, default 1), INPUT (prompt length, default 512), STEPS (decode steps summed, default 3),
#   EXTRA (more one-batch flags, e.g. "--quantization fp8 --kv-cache-dtype fp8_e4m3").
# Output: $OUT/kernels_b$BS.txt (the table) and the raw CSV beside it. The sum of kernel times is the
# GPU's busy time in a step; `bench one-batch` without ncu gives the step's wall time (with CUDA
# graphs), so the difference is what launches and gaps cost.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RLM=${RLM:-$ROOT/build-gpu/radixlm}
MODEL=${MODEL:-$ROOT/configs/llama-3.1-8b}
BS=${BS:-1}
INPUT=${INPUT:-512}
STEPS=${STEPS:-3}
EXTRA=${EXTRA:-}
OUT=${OUT:-$ROOT/out/kernel_breakdown}
NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)}
mkdir -p "$OUT"
[ -n "$NCU" ] && [ -x "$NCU" ] || { echo "kernel_breakdown: ncu not found (set NCU=)"; exit 1; }

# One run with 2 + STEPS output tokens: a prefill, then 1 + STEPS decode steps; one-batch opens the
# profiler's range after the first decode step and closes it after the last (--profile-from-start off).
csv="$OUT/kernels_b$BS.csv"
# shellcheck disable=SC2086
"$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv "$RLM" bench one-batch --model "$MODEL" \
  --load-format dummy --device cuda --batch-size "$BS" --input-len "$INPUT" --output-len $(( 2 + STEPS )) \
  --disable-cuda-graph $EXTRA 2> "$OUT/ncu_b$BS.err" | grep '^"' > "$csv"
python3 "$ROOT/tools/kernel_breakdown.py" "$csv" "$STEPS" "$BS" | tee "$OUT/kernels_b$BS.txt"
