#!/usr/bin/env bash
# The serving benchmark matrix: for each model shape (dummy weights) it measures `radixlm bench
# one-batch` decode throughput at the batch sizes the runs use, then starts `radixlm serve` once per
# configuration and runs `radixlm bench serve` over the run list. Prints one row per run — output
# tok/s, TTFT and ITL (median, p99), median TPOT, failed requests — and the output throughput as a
# ratio to one-batch decode throughput at the same batch size (the run's concurrency, measured in
# the same invocation with the configuration's --quantization / --kv-cache-dtype; fixed-concurrency
# runs over random prompts), and as a ratio to the same engine's
# end-to-end rate for one batch of the run's shape (one-batch prefill + output-length decode steps at
# the run's mid context, input + output / 2; `e2e`), which counts the prompt work a served request
# also needs. Results: $OUT/matrix.txt (the table),
# $OUT/matrix.json, every log and bench JSON under $OUT. docs/perf/serving_matrix.md has the
# numbers and their analysis.
#
# Runs (RUNS, space-separated names; QUICK=1 picks a subset that fits ~8 minutes for the 8B shape):
#   r128_c64 r128_c128 r128_c256 r128_c512   128 in / 128 out, all at once, at that concurrency
#   r1024_c64 r1024_c256                     1024 in / 1024 out
#   r2048_c64                                2048 in / 128 out
#   poisson4 poisson16                       1024 in / 128 out, Poisson arrivals at 4 / 16 req/s
#   gsp                                      the generated-shared-prefix set (16 groups x 16 prompts)
# Configurations (CONFIGS, space-separated "name:serve flags with commas for spaces"), default
#   "default:" (the server's own defaults); e.g. CONFIGS="default: nomixed:--disable-mixed-chunk".
#
# Usage on a GPU machine (build first, e.g. tools/gpu_check.sh or
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DRADIXLM_CUDA=ON && cmake --build build-gpu --target radixlm):
#   RLM=build-gpu/radixlm OUT=/some/dir bash tools/serving_matrix.sh
#   QUICK=1 MODELS=llama-3.1-8b ...; RUNS="r128_c256 poisson4" ...; SCALE=0.5 (fewer prompts)
# On the CPU (a smoke run with the embedded default model and tiny lengths, seconds):
#   SMOKE=1 RLM=build/radixlm OUT=/tmp/m bash tools/serving_matrix.sh
# Exits 1 when a run fails to produce a result, has failed requests, or a server dies.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RLM=${RLM:-$ROOT/build-gpu/radixlm}
OUT=${OUT:-$ROOT/out/serving_matrix}
PORT=${PORT:-18100}
SCALE=${SCALE:-1}
CONFIGS=${CONFIGS:-default:}
SMOKE=${SMOKE:-0}
QUICK=${QUICK:-0}
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
mkdir -p "$OUT"
TABLE="$OUT/matrix.txt"
ROWS="$OUT/matrix.jsonl"
: > "$ROWS"
FAILED=0
T0=$(date +%s)

# name -> "input output concurrency rate prompts dataset"
run_spec() {
  case "$1" in
    r128_c64) echo "128 128 64 inf 256 random";;
    r128_c128) echo "128 128 128 inf 512 random";;
    r128_c256) echo "128 128 256 inf 1024 random";;
    r128_c512) echo "128 128 512 inf 1536 random";;
    r1024_c64) echo "1024 1024 64 inf 64 random";;
    r1024_c256) echo "1024 1024 256 inf 256 random";;
    r2048_c64) echo "2048 128 64 inf 192 random";;
    poisson4) echo "1024 128 0 4 48 random";;
    poisson16) echo "1024 128 0 16 160 random";;
    gsp) echo "0 128 64 inf 256 generated-shared-prefix";;
    # The CPU smoke runs: the same shapes, small.
    smoke_c4) echo "32 8 4 inf 8 random";;
    smoke_poisson) echo "32 8 0 8 8 random";;
    smoke_gsp) echo "0 8 4 inf 8 generated-shared-prefix";;
    *) return 1;;
  esac
}

if [ "$SMOKE" = 1 ]; then
  MODELS=${MODELS:-default}
  RUNS=${RUNS:-smoke_c4 smoke_poisson smoke_gsp}
  DEVICE=${DEVICE:-cpu}
  ONE_BATCH_OUTPUT=${ONE_BATCH_OUTPUT:-4}
elif [ "$QUICK" = 1 ]; then
  MODELS=${MODELS:-llama-3.1-8b qwen3-0.6b}
  RUNS=${RUNS:-r128_c128 r128_c256 r1024_c256 poisson4}
  DEVICE=${DEVICE:-cuda}
  ONE_BATCH_OUTPUT=${ONE_BATCH_OUTPUT:-32}
else
  MODELS=${MODELS:-llama-3.1-8b qwen3-0.6b}
  RUNS=${RUNS:-r128_c64 r128_c128 r128_c256 r128_c512 r1024_c64 r1024_c256 r2048_c64 poisson4 poisson16 gsp}
  DEVICE=${DEVICE:-cuda}
  ONE_BATCH_OUTPUT=${ONE_BATCH_OUTPUT:-32}
fi
for r in $RUNS; do run_spec "$r" > /dev/null || { echo "unknown run '$r'"; exit 2; }; done

model_args() {  # the model flags of `serve` / `bench one-batch` for a MODELS entry
  case "$1" in
    default) echo "";;
    /*) echo "--model $1 --load-format ${LOAD_FORMAT:-auto}";;
    *) echo "--model $ROOT/configs/$1 --load-format dummy";;
  esac
}

# The configs carry no tokenizer: serve reads the one scripts/setup.sh generates for the family
# (carry tests/data/tokenizer/generated/<family> to a GPU machine).
tokenizer_args() {
  case "$1" in
    default|/*) echo "";;
    qwen*) echo "--tokenizer $ROOT/tests/data/tokenizer/generated/qwen3";;
    *) echo "--tokenizer $ROOT/tests/data/tokenizer/generated/llama3";;
  esac
}

scaled() { python3 -c "import sys; print(max(1, int(round($1 * $SCALE))))"; }

# The configuration's flags that change the engine's arithmetic (--quantization, --kv-cache-dtype):
# the one-batch references take them too, so each ratio compares the same weights and KV cache.
engine_flags() {
  local out=() prev=
  for f in $1; do
    case "$prev" in --quantization | --kv-cache-dtype) out+=("$prev" "$f") ;; esac
    case "$f" in --quantization=* | --kv-cache-dtype=*) out+=("$f") ;; esac
    prev=$f
  done
  echo "${out[*]}"
}
OB_FLAGS=  # set per configuration below

# One-batch decode throughput (tok/s) for batch $2, input $3 of model $1 (with $OB_FLAGS); cached in $OUT.
one_batch_log() {
  local tag=${OB_FLAGS//[^A-Za-z0-9_]/_}
  echo "$OUT/one_batch_${1//\//_}_b$2_i$3${tag:+_$tag}.log"
}
one_batch() {
  local model=$1 bs=$2 in=$3 log
  log=$(one_batch_log "$1" "$2" "$3")
  if [ ! -s "$log" ]; then
    # shellcheck disable=SC2086
    timeout "$RUN_TIMEOUT" "$RLM" bench one-batch $(model_args "$model") --device "$DEVICE" --batch-size "$bs" \
      --input-len "$in" --output-len "$ONE_BATCH_OUTPUT" $OB_FLAGS > "$log" 2>&1
  fi
  sed -nE 's/^decode step \(.*\): [0-9.]+ ms \(([0-9]+) tok\/s\).*/\1/p' "$log" | head -1
}

# The same engine's end-to-end rate for a whole batch of the run's shape (tok/s): batch $2 x output
# $4 tokens over one-batch's prefill of the batch (input $3) plus $4 decode steps at the median step
# of a one-batch run whose prompts are the run's mid context ($3 + $4 / 2 tokens: a decode step's
# attention grows with the context, so the step at the prompt length alone undercounts long outputs)
# — what `serve` would reach if it ran every request of a wave as one batch. Needs one_batch for the
# input first; runs the mid-context one itself (cached).
one_batch_e2e() {
  local mid=$(( $3 + $4 / 2 )) pre step
  pre=$(sed -nE 's/^prefill: ([0-9.]+) ms.*/\1/p' "$(one_batch_log "$1" "$2" "$3")" | head -1)
  one_batch "$1" "$2" "$mid" > /dev/null
  step=$(sed -nE 's/^decode step \(.*\): ([0-9.]+) ms.*/\1/p' "$(one_batch_log "$1" "$2" "$mid")" | head -1)
  [ -n "$pre" ] && [ -n "$step" ] && python3 -c "print($2 * $4 * 1000 / ($pre + $4 * $step))"
}

start_server() {  # model config-flags log -> sets SERVER
  "$RLM" serve $(model_args "$1") $(tokenizer_args "$1") --device "$DEVICE" --port "$PORT" $2 > "$3" 2>&1 &
  SERVER=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && return 0
    kill -0 $SERVER 2>/dev/null || { echo "serve exited:"; tail -20 "$3"; return 1; }
    sleep 0.5
  done
  echo "serve did not come up in 300 s"; return 1
}
stop_server() { [ -n "${SERVER:-}" ] && { kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null; }; SERVER=; }
trap stop_server EXIT

for model in $MODELS; do
  for cfg in $CONFIGS; do
    cname=${cfg%%:*}
    flags=${cfg#*:}
    flags=${flags//,/ }
    OB_FLAGS=$(engine_flags "$flags")
    tag="${model//\//_}_$cname"
    echo "== $model, config $cname ($(( $(date +%s) - T0 ))s)"
    # The one-batch references first (the server holds the GPU afterwards): batch = the run's
    # concurrency, input = its prompt length (runs with a fixed concurrency over random prompts).
    for r in $RUNS; do
      read -r in outl conc rate n ds <<< "$(run_spec "$r")"
      [ "$ds" = random ] && [ "$conc" != 0 ] && one_batch "$model" "$conc" "$in" > /dev/null &&
        one_batch_e2e "$model" "$conc" "$in" "$outl" > /dev/null
    done
    start_server "$model" "$flags" "$OUT/serve_$tag.log" || { FAILED=1; stop_server; continue; }
    curl -sf "http://127.0.0.1:$PORT/server_info" > "$OUT/server_info_$tag.json"
    grep -E "^radixlm: (limits|memory)" "$OUT/serve_$tag.log"
    for r in $RUNS; do
      read -r in outl conc rate n ds <<< "$(run_spec "$r")"
      n=$(scaled "$n")
      args=(--port "$PORT" --dataset-name "$ds" --num-prompts "$n" --request-rate "$rate" --warmup-requests 4
            --output-file "$OUT/bench_${tag}_$r.json")
      if [ "$ds" = random ]; then
        args+=(--random-input-len "$in" --random-output-len "$outl" --random-range-ratio 1)
      else
        groups=$(( n / 16 > 0 ? n / 16 : 1 ))
        args+=(--gsp-num-groups "$groups" --gsp-prompts-per-group $(( n / groups )) --gsp-output-len "$outl")
        [ "$SMOKE" = 1 ] && args+=(--gsp-system-prompt-len 64 --gsp-question-len 16)
      fi
      [ "$conc" != 0 ] && args+=(--max-concurrency "$conc")
      timeout "$RUN_TIMEOUT" "$RLM" bench serve "${args[@]}" > "$OUT/bench_${tag}_$r.log" 2>&1
      rc=$?
      ref=0 e2e=0
      if [ "$ds" = random ] && [ "$conc" != 0 ]; then
        ref=$(one_batch "$model" "$conc" "$in")
        e2e=$(one_batch_e2e "$model" "$conc" "$in" "$outl")
      fi
      python3 - "$OUT/bench_${tag}_$r.json" "$model" "$cname" "$r" "$rc" "${ref:-0}" "$conc" \
        "$OUT/server_info_$tag.json" "${e2e:-0}" >> "$ROWS" <<'EOF' || FAILED=1
import json, sys
path, model, cfg, run, rc, ref, bs, info, e2e = sys.argv[1:10]
row = {"model": model, "config": cfg, "run": run, "bench_rc": int(rc)}
try:
    m = json.load(open(path))
    m = m.get("metrics", m)
    for k in ("completed", "failed", "output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_itl_ms",
              "p99_itl_ms", "median_tpot_ms"):
        row[k] = m.get(k)
    if float(ref) > 0:
        row["one_batch_tok_s"] = float(ref)
        row["one_batch_bs"] = int(bs)
        row["ratio"] = m["output_throughput"] / float(ref)
    if float(e2e) > 0:
        row["one_batch_e2e_tok_s"] = float(e2e)
        row["ratio_e2e"] = m["output_throughput"] / float(e2e)
    row["server_max_running_requests"] = json.load(open(info))["max_running_requests"]
except Exception as e:
    row["error"] = str(e)
print(json.dumps(row))
sys.exit(0 if "error" not in row and row["failed"] == 0 and int(rc) == 0 else 1)
EOF
      tail -1 "$ROWS" | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('  ', r['run'], r.get('output_throughput'), 'tok/s, failed', r.get('failed'), r.get('error', ''))"
      kill -0 "$SERVER" 2>/dev/null || { echo "serve died:"; tail -20 "$OUT/serve_$tag.log"; FAILED=1; break; }
    done
    stop_server
  done
done

python3 - "$ROWS" > "$TABLE" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
hdr = f"{'model':<14} {'config':<9} {'run':<14} {'out tok/s':>10} {'TTFT med':>9} {'TTFT p99':>9} {'ITL med':>8} {'ITL p99':>8} {'TPOT med':>9} {'failed':>6} {'1-batch tok/s':>13} {'ratio':>6} {'e2e tok/s':>9} {'ratio':>6}"
print(hdr)
def f(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) else "-"
for r in rows:
    if "error" in r:
        print(f"{r['model']:<14} {r['config']:<9} {r['run']:<14} no result: {r['error']}")
        continue
    ob = f"{r['one_batch_tok_s']:.0f}@{r['one_batch_bs']}" if "one_batch_tok_s" in r else "-"
    print(f"{r['model']:<14} {r['config']:<9} {r['run']:<14} {f(r['output_throughput'], '.0f'):>10} "
          f"{f(r['median_ttft_ms'], '.1f'):>9} {f(r['p99_ttft_ms'], '.1f'):>9} {f(r['median_itl_ms'], '.1f'):>8} "
          f"{f(r['p99_itl_ms'], '.1f'):>8} {f(r['median_tpot_ms'], '.2f'):>9} {f(r['failed'], 'd'):>6} {ob:>13} "
          f"{f(r.get('ratio'), '.2f'):>6} {f(r.get('one_batch_e2e_tok_s'), '.0f'):>9} {f(r.get('ratio_e2e'), '.2f'):>6}")
EOF
python3 -c "import json,sys; print(json.dumps([json.loads(l) for l in open(sys.argv[1]) if l.strip()], indent=1))" \
  "$ROWS" > "$OUT/matrix.json"
echo "== matrix ($(( $(date +%s) - T0 ))s)"
cat "$TABLE"
exit $FAILED
