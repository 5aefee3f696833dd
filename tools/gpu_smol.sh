#!/usr/bin/env bash
# SmolLM2 on the lent GPU machine. The default model (models/SmolLM2-135M-Instruct.Q4_1.gguf,
# 98 MB) is larger than what one device call may carry (64 MiB with the tracked tree), so it
# travels in four parts over consecutive calls to one warm machine (tools/gpu_smol_split.sh makes
# them here in .smol_a ... .smol_d, each carried by one call):
#   bash tools/gpu_smol.sh stash .smol_a      # each call: keep its part outside the repo copy
#   bash tools/gpu_smol.sh run                 # last call (after stashing .smol_d): join, verify
#                                              # the SHA-256, run the SmolLM2 GPU checks
# `run` needs a build from tools/gpu_check.sh (BUILD, default <repo>/build-gpu) and writes its
# logs to $OUT. Checks: ModelCudaSmolLM2 (greedy tokens GPU == CPU) and `radixlm generate` of
# chat prompts on --device cpu and --device cuda, whose answers must be identical.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STASH=/root/radixlm_smol_parts
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
BUILD=${BUILD:-$ROOT/build-gpu}
OUT=${OUT:-$ROOT/out/gpu_smol}

case "${1:-}" in
  stash)
    src="$ROOT/$2"
    mkdir -p "$STASH" && cp "$src/part" "$STASH/$(basename "$2").part" || exit 1
    [ -f "$src/sha256" ] && cp "$src/sha256" "$STASH/sha256"
    ls -l "$STASH"
    ;;
  run)
    mkdir -p "$OUT" "$ROOT/models"
    if [ ! -f "$MODEL" ]; then
      cat "$STASH"/.smol_a.part "$STASH"/.smol_b.part "$STASH"/.smol_c.part "$STASH"/.smol_d.part > "$MODEL" || exit 1
    fi
    want=$(cat "$STASH/sha256"); got=$(sha256sum "$MODEL" | cut -c1-64)
    if [ "$want" != "$got" ]; then echo "SHA-256 mismatch: $got, want $want"; exit 1; fi
    echo "model joined: $(stat -c %s "$MODEL") bytes, SHA-256 ok"
    # LD_LIBRARY_PATH of the carried Debian libraries (unpacked by gpu_check.sh on this machine).
    export LD_LIBRARY_PATH="/tmp/rlmdeps/usr/lib/x86_64-linux-gnu:/tmp/rlmdeps/usr/lib/x86_64-linux-gnu/openblas-pthread:/tmp/rlmdeps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
    fail=0
    timeout 200 "$BUILD/model_cuda_test" --gtest_filter='ModelCudaSmolLM2*' --gtest_color=no > "$OUT/smol_test.log" 2>&1 || fail=1
    tail -4 "$OUT/smol_test.log"
    grep -q '\[  PASSED  \] 1 test' "$OUT/smol_test.log" || fail=1
    i=0
    for prompt in "What is the capital of France?" "Write a haiku about GPUs." "Explain what a KV cache is in two sentences."; do
      i=$((i + 1))
      for dev in cpu cuda; do
        timeout 120 "$BUILD/radixlm" generate --device "$dev" --max-tokens 64 --temperature 0 --chat --prompt "$prompt" \
          > "$OUT/smol_gen_${i}_$dev.txt" 2> "$OUT/smol_gen_${i}_$dev.err" || fail=1
      done
      if cmp -s "$OUT/smol_gen_${i}_cpu.txt" "$OUT/smol_gen_${i}_cuda.txt"; then
        echo "prompt $i: cpu == cuda: $(head -c 200 "$OUT/smol_gen_${i}_cuda.txt" | tr '\n' ' ')"
      else
        echo "prompt $i: DIFFERENT"; diff "$OUT/smol_gen_${i}_cpu.txt" "$OUT/smol_gen_${i}_cuda.txt" | head; fail=1
      fi
    done
    echo "smol: $([ $fail = 0 ] && echo ok || echo FAIL)"
    exit $fail
    ;;
  *)
    echo "usage: gpu_smol.sh stash <.smol_x dir> | run" >&2; exit 2 ;;
esac
