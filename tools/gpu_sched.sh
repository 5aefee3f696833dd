#!/usr/bin/env bash
# The scheduler work on one GPU, unattended (logs under $OUT): build with CUDA (tools/gpu_check.sh:
# CUDA test binaries, the CPU suites skipped), the start-up checks (`bench one-batch --batch-size
# 512 --input-len 1024` on the 8B shape: prefill chunked within the memory plan; serve with 1,024
# concurrent 2,048-token prompts: 0 failed), then tools/serving_matrix.sh (QUICK=1 by default; FULL=1
# for every run). ~8 minutes with QUICK=1 after the build.
#   OUT=/some/dir bash tools/gpu_sched.sh          SKIP_BUILD=1 reuses build-gpu
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/out/gpu_sched}
BUILD=${BUILD:-$ROOT/build-gpu}
RLM=$BUILD/radixlm
mkdir -p "$OUT"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  OUT="$OUT/check" BUILD="$BUILD" SKIP_CTEST=1 BENCH=0 bash "$ROOT/tools/gpu_check.sh"
fi
echo "== bench one-batch --batch-size 512 --input-len 1024 (llama-3.1-8b)"
timeout 300 "$RLM" bench one-batch --model "$ROOT/configs/llama-3.1-8b" --batch-size 512 --input-len 1024 \
  --output-len 8 > "$OUT/one_batch_512x1024.log" 2>&1
echo "rc=$?"; tail -6 "$OUT/one_batch_512x1024.log"
echo "== serve: 1024 concurrent requests of 2048-token prompts (llama-3.1-8b)"
PORT=18300
"$RLM" serve "$ROOT/configs/llama-3.1-8b" --tokenizer "$ROOT/tests/data/tokenizer/generated/llama3" \
  --load-format dummy --port $PORT > "$OUT/serve_1024x2048.log" 2>&1 &
S=$!
for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && break; sleep 0.5; done
curl -s "http://127.0.0.1:$PORT/server_info" > "$OUT/server_info.json"; cat "$OUT/server_info.json"; echo
timeout 400 "$RLM" bench serve --port $PORT --dataset-name random --random-input-len 2048 --random-output-len 16 \
  --random-range-ratio 1 --num-prompts 1024 --request-rate inf --max-concurrency 1024 \
  --output-file "$OUT/serve_1024x2048.json" > "$OUT/bench_1024x2048.log" 2>&1
echo "rc=$?"; grep -iE "failed|output token throughput|Successful" "$OUT/bench_1024x2048.log" | head -5
kill -0 $S 2>/dev/null && echo "serve alive" || { echo "serve died"; tail -20 "$OUT/serve_1024x2048.log"; }
kill $S 2>/dev/null; wait $S 2>/dev/null
echo "== serving matrix"
if [ "${FULL:-0}" = 1 ]; then Q=0; else Q=1; fi
QUICK=$Q RLM="$RLM" OUT="$OUT/matrix" bash "$ROOT/tools/serving_matrix.sh"
