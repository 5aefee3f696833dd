#!/usr/bin/env bash
# `radixlm serve` vs `llama-server -np C` on the CPU: same GGUF, same thread count, the same client
# (`radixlm bench serve`, OpenAI /v1/completions streaming, random token-id prompts), interleaved
# rounds, medians.
#
#   tools/serve_vs_llamaserver.sh [--threads N] [--rounds R] [--model GGUF] [--skip-q4km]
#                                 [--concurrency C] [--num-prompts P] [--input-len I] [--output-len O]
#                                 [--result-dir DIR]
#
# llama-server is built with tools/llamacpp_build.sh (llama-cpp-python's sdist, the same llama.cpp
# as tools/cpu_vs_llamacpp.sh), which also makes the Q4_K_M file of the model. Each round starts
# llama-server -m GGUF -np C -t N -c C*(I+O+64), then radixlm serve --model GGUF --threads N, one at a
# time, and drives each with
#   radixlm bench serve --backend openai --dataset-name random --random-input-len I
#     --random-output-len O --random-range-ratio 1 --num-prompts P --max-concurrency C
# (ignore_eos, so every request generates O tokens; one warm-up request first). Prints every run's
# median TPOT / ITL / TTFT, output tok/s and failed requests, then the medians over the rounds and the
# ratios llama-server / radixlm for the times (> 1: radixlm faster) and radixlm / llama-server for
# the throughput. A failed request makes the script fail: such a run is not a result. --result-dir
# keeps every run's `bench serve --output-file` JSON (per-request TTFT, ITL, latency) and server log.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
THREADS=2
ROUNDS=3
MODEL=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
SKIP_Q4KM=0
CONCURRENCY=8
NUM_PROMPTS=32
INPUT_LEN=256
OUTPUT_LEN=64
PORT=${PORT:-18431}
RESULT_DIR=
while [[ $# -gt 0 ]]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --skip-q4km) SKIP_Q4KM=1; shift ;;
    --concurrency) CONCURRENCY=$2; shift 2 ;;
    --num-prompts) NUM_PROMPTS=$2; shift 2 ;;
    --input-len) INPUT_LEN=$2; shift 2 ;;
    --output-len) OUTPUT_LEN=$2; shift 2 ;;
    --result-dir) RESULT_DIR=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
RADIXLM=${RADIXLM:-$ROOT/build/radixlm}  # RADIXLM=path picks another build
[[ -x $RADIXLM ]] || { echo "build radixlm first (cmake --build build -j2), or set RADIXLM" >&2; exit 1; }
source "$ROOT/tools/llamacpp_build.sh"
if [[ $SKIP_Q4KM == 0 ]]; then
  llama_cpp_build "$ROOT" llama-server llama-quantize
else
  llama_cpp_build "$ROOT" llama-server
fi
MODELS=("$MODEL")
[[ $SKIP_Q4KM == 0 ]] && MODELS+=("$(llama_cpp_q4km "$MODEL")")

OUT=$(mktemp -d)
SERVER_PID=
stop_server() {
  if [[ -n $SERVER_PID ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
  fi
}
trap 'stop_server; rm -rf "$OUT"' EXIT

# $1 engine, $2 model, $3 log file: starts the server in the background and waits for /health.
start_server() {
  case $1 in
    llama-server)
      "$LLAMA_BUILD/bin/llama-server" -m "$2" -np "$CONCURRENCY" -t "$THREADS" -tb "$THREADS" \
        -c $((CONCURRENCY * (INPUT_LEN + OUTPUT_LEN + 64))) --host 127.0.0.1 --port "$PORT" >"$3" 2>&1 &
      ;;
    radixlm)
      "$RADIXLM" serve --model "$2" --load-format gguf --device cpu --threads "$THREADS" \
        --host 127.0.0.1 --port "$PORT" >"$3" 2>&1 &
      ;;
  esac
  SERVER_PID=$!
  for ((i = 0; i < 600; ++i)); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "$1 exited at start-up:" >&2
      tail -20 "$3" >&2
      exit 1
    fi
    "$ROOT/.venv/bin/python" -c 'import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
except Exception:
    sys.exit(1)' "http://127.0.0.1:$PORT/health" && return 0
    sleep 0.5
  done
  echo "$1 did not answer /health within 300 s" >&2
  exit 1
}

RESULTS=$OUT/results.tsv
echo "== $ROUNDS interleaved rounds, $THREADS threads ($(nproc) cores), $INPUT_LEN in / $OUTPUT_LEN out," \
  "$NUM_PROMPTS prompts at concurrency $CONCURRENCY"
for ((round = 1; round <= ROUNDS; ++round)); do
  echo "-- round $round ($(uptime | sed 's/.*load/load/'))"
  for m in "${MODELS[@]}"; do
    name=$(basename "$m" .gguf)
    for engine in llama-server radixlm; do
      json=$OUT/$name.$engine.$round.json
      start_server "$engine" "$m" "$OUT/$engine.log"
      status=0
      "$RADIXLM" bench serve --backend openai --host 127.0.0.1 --port "$PORT" --dataset-name random \
        --random-input-len "$INPUT_LEN" --random-output-len "$OUTPUT_LEN" --random-range-ratio 1 \
        --num-prompts "$NUM_PROMPTS" --max-concurrency "$CONCURRENCY" \
        --seed "$round" --output-file "$json" >"$OUT/bench.log" 2>&1 || status=$?
      stop_server
      if [[ -n $RESULT_DIR ]]; then
        mkdir -p "$RESULT_DIR"
        cp "$OUT/$engine.log" "$RESULT_DIR/$name.$engine.$round.log"
        [[ -f $json ]] && cp "$json" "$RESULT_DIR/"
      fi
      if [[ ! -f $json ]]; then
        echo "bench serve against $engine wrote no result (exit $status):" >&2
        tail -20 "$OUT/bench.log" >&2
        exit 1
      fi
      "$ROOT/.venv/bin/python" - "$json" "$name" "$engine" "$RESULTS" "$INPUT_LEN" "$OUTPUT_LEN" <<'PY'
import json, sys
path, model, engine, results, input_len, output_len = sys.argv[1:]
r = json.load(open(path))
row = [r["median_tpot_ms"], r["median_itl_ms"], r["median_ttft_ms"], r["output_throughput"], r["failed"]]
print(f"  {model:36} {engine:13} TPOT {row[0]:7.1f} ms  ITL {row[1]:6.1f} ms  TTFT {row[2]:8.1f} ms  "
      f"{row[3]:7.1f} out tok/s  failed {row[4]}")
# Both servers must have done the same work: every prompt read as I tokens, O tokens generated.
other = [q for q in r["requests"]
         if q["success"] and (q["input_len"], q["output_len"]) != (int(input_len), int(output_len))]
if r["failed"] or other:
    print(f"  FAILED: {r['failed']} failed requests ({r.get('first_error', '')}); {len(other)} "
          f"answers with other than {input_len} prompt / {output_len} completion tokens",
          file=sys.stderr)
    sys.exit(1)
with open(results, "a") as f:
    f.write("\t".join([model, engine] + [str(v) for v in row]) + "\n")
PY
    done
  done
done

echo
echo "== medians of $ROUNDS rounds ($(uptime | sed 's/.*load/load/'))"
"$ROOT/.venv/bin/python" - "$RESULTS" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    model, engine, *values = line.rstrip("\n").split("\t")
    runs[(model, engine)].append([float(v) for v in values])
models = list(dict.fromkeys(model for model, _ in runs))
print(f"{'model':36} {'':13} {'TPOT ms':>8} {'ITL ms':>8} {'TTFT ms':>9} {'out tok/s':>10}")
for m in models:
    med = {}
    for engine in ("llama-server", "radixlm"):
        rows = runs[(m, engine)]
        med[engine] = [statistics.median(col) for col in zip(*rows)]
        e = med[engine]
        print(f"{m:36} {engine:13} {e[0]:8.1f} {e[1]:8.1f} {e[2]:9.1f} {e[3]:10.1f}")
    l, r = med["llama-server"], med["radixlm"]
    print(f"{m:36} {'ratio':13} {l[0] / r[0]:7.2f}x {l[1] / r[1]:7.2f}x {l[2] / r[2]:8.2f}x {r[3] / l[3]:9.2f}x"
          "  (> 1: radixlm better)")
PY
