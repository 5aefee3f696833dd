#!/usr/bin/env bash
# Same-run A/B of decode steps: `radixlm bench one-batch` for every variant (a label and the
# environment it runs under) at every batch size, ROUNDS rounds with the variants interleaved, then
# one line per (batch, variant) with the median of the rounds' median steps and its ratio to the
# first variant. For kernel switches such as RADIXLM_FP8_DECODE_MMA=0 (docs/perf/decode_kernels.md:
# every comparison there is within one call on one machine).
#
# Usage (after a build; on a GPU machine or, with DEVICE=cpu and a small MODEL, on the CPU):
#   VARIANTS="base: mma0:RADIXLM_FP8_DECODE_MMA=0" BATCHES="128 256" ROUNDS=2 \
#     EXTRA="--quantization fp8 --kv-cache-dtype fp8_e4m3" OUT=/some/dir bash tools/decode_ab.sh
#   VARIANTS: space-separated label:ENV=VALUE[,ENV=VALUE...] (nothing after ':' = the plain run);
#   RLM=PATH among a variant's settings runs that binary instead (e.g. "main:RLM=/tmp/main/radixlm
#   new:" compares a build of main with the change in the same call) and is not put in its environment.
#   RLM (binary, default build-gpu/radixlm, else build/radixlm), MODEL (default configs/llama-3.1-8b),
#   INPUT (prompt tokens, 512), STEPS (output tokens, 32), DEVICE (cuda), TIMEOUT (seconds per run, 90).
# Output: the table on stdout and $OUT/decode_ab.txt; every run's log under $OUT. A run that fails
# or prints no step is reported as such and makes the script exit 1; malformed VARIANTS, BATCHES or
# ROUNDS exit 2 before anything runs.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RLM=${RLM:-$( [ -x "$ROOT/build-gpu/radixlm" ] && echo "$ROOT/build-gpu/radixlm" || echo "$ROOT/build/radixlm" )}
MODEL=${MODEL:-$ROOT/configs/llama-3.1-8b}
VARIANTS=${VARIANTS:-"base:"}
BATCHES=${BATCHES:-"1 256"}
ROUNDS=${ROUNDS:-1}
INPUT=${INPUT:-512}
STEPS=${STEPS:-32}
DEVICE=${DEVICE:-cuda}
TIMEOUT=${TIMEOUT:-90}
EXTRA=${EXTRA:-}
OUT=${OUT:-$ROOT/out/decode_ab}
for v in $VARIANTS; do
  [[ $v =~ ^[A-Za-z0-9_.-]+:([A-Za-z_][A-Za-z0-9_]*=[^,]*(,[A-Za-z_][A-Za-z0-9_]*=[^,]*)*)?$ ]] ||
    { echo "decode_ab: variant '$v' is not label:ENV=VALUE[,ENV=VALUE...] (label: letters, digits, _ . -)" >&2; exit 2; }
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "decode_ab: ROUNDS '$ROUNDS' is not a positive integer" >&2; exit 2; }
for bs in $BATCHES; do
  [[ $bs =~ ^[1-9][0-9]*$ ]] || { echo "decode_ab: batch size '$bs' is not a positive integer" >&2; exit 2; }
done
mkdir -p "$OUT"
status=0
declare -A steps  # "batch label" -> step ms of each round, space-separated

for bs in $BATCHES; do
  for round in $(seq 1 "$ROUNDS"); do
    for v in $VARIANTS; do
      label=${v%%:*}
      bin=$RLM
      envs=()
      IFS=',' read -ra settings <<< "${v#*:}"
      for s in "${settings[@]}"; do
        if [[ $s == RLM=* ]]; then bin=${s#RLM=}; else envs+=("$s"); fi
      done
      log="$OUT/b${bs}_${label}_r${round}.log"
      # shellcheck disable=SC2086
      env "${envs[@]}" timeout "$TIMEOUT" "$bin" bench one-batch --model "$MODEL" \
        --load-format dummy --device "$DEVICE" --batch-size "$bs" --input-len "$INPUT" --output-len "$STEPS" $EXTRA \
        > "$log" 2>&1
      rc=$?
      ms=$(grep -m1 -oE '^decode step \([^)]*\): [0-9.]+ ms' "$log" | grep -oE '[0-9.]+ ms$' | cut -d' ' -f1)
      if [ $rc -ne 0 ] || [ -z "$ms" ]; then
        echo "decode_ab: batch $bs $label round $round failed (rc $rc, log $log)" >&2
        status=1
        continue
      fi
      steps["$bs $label"]+="$ms "
    done
  done
done

{
  printf '%-7s %-12s %-12s %-8s %s\n' batch variant "step (ms)" ratio rounds
  for bs in $BATCHES; do
    ref=""
    for v in $VARIANTS; do
      label=${v%%:*}
      vals=${steps["$bs $label"]:-}
      [ -z "$vals" ] && { printf '%-7s %-12s %-12s\n' "$bs" "$label" failed; continue; }
      # shellcheck disable=SC2086  # vals: one number per word
      med=$(printf '%s\n' $vals | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
      [ -z "$ref" ] && ref=$med
      printf '%-7s %-12s %-12s %-8s %s\n' "$bs" "$label" "$med" "$(awk -v a="$med" -v b="$ref" 'BEGIN {printf "%.3f", a / b}')" "$vals"
    done
  done
} | tee "$OUT/decode_ab.txt"
exit $status
