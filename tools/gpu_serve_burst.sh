#!/usr/bin/env bash
# Burst load on one GPU: `radixlm serve` with the Llama-3.1-8B shape (dummy bf16 weights) and
# `radixlm bench serve` 128-token prompts / 128 output tokens with every request sent at once, at
# concurrency 128, 256 and 512 (3 x concurrency requests each). The bar of the front end: 0 failed
# requests. Prints one line per run (output tok/s, median TTFT and ITL, failed) and exits 1 if any
# request failed or a run did not finish.
#
# Usage: RLM=build-gpu/radixlm OUT=/some/dir bash tools/gpu_serve_burst.sh
#   MODEL=configs/qwen3-0.6b CONCURRENCY="128 256" SERVE_ARGS="--max-running-requests 256" ...
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RLM=${RLM:-$ROOT/build-gpu/radixlm}
OUT=${OUT:-$ROOT/out/serve_burst}
MODEL=${MODEL:-$ROOT/configs/llama-3.1-8b}
# The configs carry no tokenizer: the Llama-3 tokenizer that scripts/setup.sh generates (carry
# tests/data/tokenizer/generated to the GPU machine; qwen3/ for the Qwen3 shapes).
TOKENIZER=${TOKENIZER:-$ROOT/tests/data/tokenizer/generated/llama3}
CONCURRENCY=${CONCURRENCY:-128 256 512}
PORT=${PORT:-18000}
SERVE_ARGS=${SERVE_ARGS:-}
mkdir -p "$OUT"
FAILED=0

"$RLM" serve "$MODEL" --tokenizer "$TOKENIZER" --load-format dummy --device cuda --port "$PORT" $SERVE_ARGS > "$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 1 240); do
  curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && break
  kill -0 $SERVER 2>/dev/null || { echo "serve exited:"; tail -20 "$OUT/serve.log"; exit 1; }
  sleep 0.5
done
head -3 "$OUT/serve.log"

for c in $CONCURRENCY; do
  n=$((3 * c))
  log="$OUT/burst_c$c.log"
  timeout 300 "$RLM" bench serve --port "$PORT" --dataset-name random --random-input-len 128 \
    --random-output-len 128 --random-range-ratio 1 --num-prompts "$n" --request-rate inf \
    --max-concurrency "$c" --warmup-requests 4 --output-file "$OUT/burst_c$c.json" > "$log" 2>&1
  rc=$?
  python3 - "$OUT/burst_c$c.json" "$c" "$n" "$rc" <<'EOF' || FAILED=1
import json, sys
path, c, n, rc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
try:
    j = json.load(open(path))
except Exception as e:
    print(f"concurrency {c}: no result ({e}), bench rc {rc}")
    sys.exit(1)
m = j.get("metrics", j)
def g(*keys):
    for k in keys:
        if k in m:
            return m[k]
    return float("nan")
print(f"concurrency {c}: {n} requests, failed {g('failed')}, output {g('output_throughput'):.0f} tok/s, "
      f"median TTFT {g('median_ttft_ms'):.1f} ms, median ITL {g('median_itl_ms'):.1f} ms, "
      f"p99 ITL {g('p99_itl_ms'):.1f} ms, bench rc {rc}")
sys.exit(0 if rc == 0 and g('failed') == 0 else 1)
EOF
done
kill -0 $SERVER 2>/dev/null || { echo "serve died:"; tail -20 "$OUT/serve.log"; FAILED=1; }
exit $FAILED
