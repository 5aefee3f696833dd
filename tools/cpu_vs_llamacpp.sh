#!/usr/bin/env bash
# radixlm vs llama.cpp on the CPU, same GGUF, same thread count, interleaved runs, medians.
#
#   tools/cpu_vs_llamacpp.sh [--threads N] [--reps R] [--model GGUF] [--skip-q4km]
#
# llama.cpp comes from llama-cpp-python's source distribution on PyPI (vendor/llama.cpp, pinned in
# tools/llamacpp_build.sh), built with cmake under build/llamacpp/ (never committed). The script also makes a Q4_K_M
# file of the model (llama-quantize --allow-requantize from the Q4_1 file) to measure K-quants.
# Measured per model (each radixlm run is `radixlm bench one-batch --device cpu --threads N`):
#   batch-1 decode   llama-bench -p 0 -n 128         vs  --batch-size 1 --input-len 1 --output-len 129
#   prefill 512      llama-bench -p 512 -n 0         vs  --batch-size 1 --input-len 512 --output-len 1
#   decode 8 / 32    llama-batched-bench -npp 128 -ntg 128 -npl 8,32 (S_TG)
#                                                    vs  --batch-size B --input-len 128 --output-len 129
#   radixlm 1 thread batch-1 decode (for the 2-thread scaling ratio)
# Prints every run, then medians and ratios (radixlm / llama.cpp; > 1 means radixlm is faster).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
THREADS=2
REPS=5
MODEL=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
SKIP_Q4KM=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --skip-q4km) SKIP_Q4KM=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
# ---- llama.cpp from the PyPI sdist ------------------------------------------------------------
source "$ROOT/tools/llamacpp_build.sh"
llama_cpp_build "$ROOT" llama-bench llama-batched-bench llama-quantize
RADIXLM=${RADIXLM:-$ROOT/build/radixlm}  # RADIXLM=path picks another build
[[ -x $RADIXLM ]] || { echo "build radixlm first (cmake --build build -j2), or set RADIXLM" >&2; exit 1; }

MODELS=("$MODEL")
if [[ $SKIP_Q4KM == 0 ]]; then
  Q4KM=$(llama_cpp_q4km "$MODEL")
  MODELS+=("$Q4KM")
fi

# ---- one measurement each ---------------------------------------------------------------------
llama_bench() {  # $1 model, $2 -p, $3 -n -> tokens/s
  "$LLAMA_BUILD/bin/llama-bench" -m "$1" -t "$THREADS" -p "$2" -n "$3" -r 1 -o json 2>/dev/null |
    "$ROOT/.venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])'
}
llama_batched() {  # $1 model, $2 parallel sequences -> S_TG tokens/s
  "$LLAMA_BUILD/bin/llama-batched-bench" -m "$1" -t "$THREADS" -tb "$THREADS" -c 8448 -b 2048 -ub 512 \
    -npp 128 -ntg 128 -npl "$2" --output-format jsonl 2>/dev/null |
    "$ROOT/.venv/bin/python" -c 'import json,sys
for line in sys.stdin:
    if line.startswith("{"): print(json.loads(line)["speed_tg"])'
}
ours() {  # $1 model, $2 threads, $3 batch, $4 input, $5 output, $6 "decode"|"prefill" -> tokens/s
  "$RADIXLM" bench one-batch --model "$1" --load-format gguf --device cpu --threads "$2" --batch-size "$3" \
    --input-len "$4" --output-len "$5" |
    "$ROOT/.venv/bin/python" -c 'import re,sys
text = sys.stdin.read()
key = "prefill" if sys.argv[1] == "prefill" else "decode step"
m = re.search(r"^" + key + r"[^\n]*\(([0-9.]+) tok/s\)", text, re.M)
print(m.group(1))' "$6"
}

RESULTS=$(mktemp)
record() { printf '%s\t%s\n' "$1" "$2" >> "$RESULTS"; printf '  %-48s %10.1f tok/s\n' "$1" "$2"; }

echo "== $REPS interleaved rounds, $THREADS threads ($(nproc) cores)"
for ((rep = 1; rep <= REPS; ++rep)); do
  echo "-- round $rep"
  for m in "${MODELS[@]}"; do
    name=$(basename "$m" .gguf)
    record "$name|llama.cpp|decode bs1" "$(llama_bench "$m" 0 128)"
    record "$name|radixlm|decode bs1" "$(ours "$m" "$THREADS" 1 1 129 decode)"
    record "$name|radixlm|decode bs1 1 thread" "$(ours "$m" 1 1 1 129 decode)"
    record "$name|llama.cpp|prefill 512" "$(llama_bench "$m" 512 0)"
    record "$name|radixlm|prefill 512" "$(ours "$m" "$THREADS" 1 512 1 prefill)"
    for b in 8 32; do
      record "$name|llama.cpp|decode bs$b" "$(llama_batched "$m" "$b")"
      record "$name|radixlm|decode bs$b" "$(ours "$m" "$THREADS" "$b" 128 129 decode)"
    done
  done
done

echo
echo "== medians of $REPS rounds, $THREADS threads (ratio = radixlm / llama.cpp; > 1: radixlm faster)"
"$ROOT/.venv/bin/python" - "$RESULTS" "$THREADS" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    key, value = line.rstrip("\n").split("\t")
    runs[tuple(key.split("|"))].append(float(value))
models = list(dict.fromkeys(k[0] for k in runs))
print(f"{'model':36} {'measurement':14} {'llama.cpp':>10} {'radixlm':>10} {'ratio':>7}")
for m in models:
    med = lambda engine, what: statistics.median(runs[(m, engine, what)])
    for what in ("decode bs1", "prefill 512", "decode bs8", "decode bs32"):
        l, r = med("llama.cpp", what), med("radixlm", what)
        print(f"{m:36} {what:14} {l:10.1f} {r:10.1f} {r / l:6.2f}x")
    one, two = med("radixlm", "decode bs1 1 thread"), med("radixlm", "decode bs1")
    print(f"{m:36} {'bs1 scaling':14} {'':>10} {one:10.1f} {two / one:6.2f}x  (radixlm {sys.argv[2]} threads / 1 thread)")
PY
rm -f "$RESULTS"
