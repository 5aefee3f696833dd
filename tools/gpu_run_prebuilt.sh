#!/usr/bin/env bash
# On the GPU machine: unpack .gpu_carry.tar.xz (tools/gpu_pack.sh), run every CUDA test binary, the
# disabled-by-default attention timings, and the GPU-vs-CPU generate check; logs to $OUT, a
# summary table last. The binaries look for test data under the source dir they were built in
# (/work/main), so that path is linked to this checkout.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT" /tmp/rlm /work
[ -e /work/main ] || ln -s "$ROOT" /work/main
tar -C /tmp/rlm -xJf "$ROOT/.gpu_carry.tar.xz"
export RADIXLM_SOURCE_DIR="$ROOT"
export LD_LIBRARY_PATH=/tmp/rlm/deps:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
{ cat /etc/os-release | head -3; ldd --version | head -1; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } > "$OUT/machine.txt" 2>&1
echo "root $ROOT" >> "$OUT/machine.txt"; ls -la /work >> "$OUT/machine.txt" 2>&1; ls "$ROOT/tests/golden" | head -3 >> "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
SUMMARY="$OUT/summary.txt"; : > "$SUMMARY"
for bin in /tmp/rlm/bin/${TESTS:-*_test}; do
  [ -x "$bin" ] || continue  # TESTS=none: unpack and check the machine only
  name=$(basename "$bin")
  timeout 200 "$bin" --gtest_color=no > "$OUT/$name.log" 2>&1
  rc=$?
  pass=$(grep -E '^\[  PASSED  \]' "$OUT/$name.log" | grep -oE '[0-9]+' | head -1)
  fail=$(grep -E '^\[  FAILED  \] [0-9]+ test' "$OUT/$name.log" | grep -oE '[0-9]+' | head -1)
  skip=$(grep -E '^\[  SKIPPED \] [0-9]+ test' "$OUT/$name.log" | grep -oE '[0-9]+' | head -1)
  printf '%-36s rc=%-3s passed=%-4s failed=%-4s skipped=%s\n' "$name" "$rc" "${pass:-0}" "${fail:-0}" "${skip:-0}" >> "$SUMMARY"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/$name.log" | head -20 >> "$SUMMARY"
  # The first failure's details, so a run whose log files do not come back still shows them.
  grep -B2 -A12 -m1 -E 'Failure$' "$OUT/$name.log" | head -30 >> "$SUMMARY"
done
if [ -z "${TESTS:-}" ] && [ -x /tmp/rlm/bin/attention_cuda_test ]; then
  timeout 200 /tmp/rlm/bin/attention_cuda_test --gtest_also_run_disabled_tests --gtest_filter='*Timing*' \
    > "$OUT/attention_timing.log" 2>&1
  grep -iE 'GB/s|TFLOP|ratio' "$OUT/attention_timing.log" >> "$SUMMARY"
fi
for m in llama_gqa1_hd64 qwen3_gqa2_hd128; do
  for d in cpu cuda; do
    timeout 120 /tmp/rlm/bin/radixlm generate --device $d --model "$ROOT/tests/golden/$m" \
      --prompt-ids 1,2,3,4,5 --prompt-ids 9,8,7 --max-tokens 16 --ignore-eos > "$OUT/gen_${m}_$d.txt" 2>&1
  done
  if cmp -s "$OUT/gen_${m}_cpu.txt" "$OUT/gen_${m}_cuda.txt"; then echo "generate $m cpu==cuda: same tokens" >> "$SUMMARY";
  else echo "generate $m cpu vs cuda: DIFFER (see gen_*.txt)" >> "$SUMMARY"; fi
done
echo "== summary"
cat "$SUMMARY"
