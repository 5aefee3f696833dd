#!/bin/bash
# CPU page-size measurement: shared-prefix workload through bench serve.
cd "$(dirname "$0")/.."
for ps in 1 16 64; do
  ./build/radixlm serve --port 18191 --page-size $ps --max-total-tokens 32768 > ${OUT_DIR:-/tmp}/ps_$ps.log 2>&1 &
  pid=$!
  for i in $(seq 60); do curl -s localhost:18191/health >/dev/null && break; sleep 1; done
  ./build/radixlm bench serve --port 18191 --dataset-name generated-shared-prefix --gsp-num-groups 4 \
    --gsp-prompts-per-group 8 --gsp-system-prompt-len 300 --gsp-question-len 40 --gsp-output-len 16 \
    --num-prompts 32 --max-concurrency 8 --seed 1 --output-file ${OUT_DIR:-/tmp}/ps_$ps.json > ${OUT_DIR:-/tmp}/ps_bench_$ps.log 2>&1
  curl -s localhost:18191/metrics | grep -E "^radixlm_(cached_tokens_total|prompt_tokens_total|prefill_computed)" > ${OUT_DIR:-/tmp}/ps_metrics_$ps.txt
  kill -TERM $pid; wait $pid
done
