#!/usr/bin/env bash
# On the GPU machine, after tools/gpu_check.sh built build-gpu: (1) the mixed constrained/free
# batch against the same batch free (tools/bench_grammar_serving.py) on a dummy-weight
# Llama-3.1-8B shape (bf16) with the Llama-3 vocabulary; (2) the host cost of the masks per token
# (radixlm bench grammar) replayed through xgrammar's Python package when importable
# (tools/bench_grammar_xgrammar.py). Logs to $OUT.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/out/grammar_bench}
BIN=${BIN:-$ROOT/build-gpu/radixlm}
TOK=$ROOT/tests/data/tokenizer/generated/llama3
PY=${PYTHON:-python3}
mkdir -p "$OUT"
MODEL=$(mktemp -d)
cat > "$MODEL/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
 "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
 "head_dim": 128, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
 "bos_token_id": 128000, "eos_token_id": 128001, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}
JSON
if [ "${SKIP_SERVING:-0}" != 1 ]; then
  "$BIN" serve --model "$MODEL" --load-format dummy --tokenizer "$TOK" --port 0 --context-length 1024 \
    --max-running-requests 128 ${SERVE_FLAGS:-} > "$OUT/serve.log" 2>&1 &
  SERVER=$!
  PORT=""
  for _ in $(seq 1 240); do
    PORT=$(grep -oE 'on http://127\.0\.0\.1:[0-9]+' "$OUT/serve.log" | grep -oE '[0-9]+$' | head -1)
    [ -n "$PORT" ] && break
    sleep 0.5
  done
  if [ -z "$PORT" ]; then echo "server did not start"; tail -20 "$OUT/serve.log"; kill $SERVER; exit 1; fi
  grep -E "limits|CUDA graphs|max-running" "$OUT/serve.log" | head -3
  "$PY" "$ROOT/tools/bench_grammar_serving.py" --url "http://127.0.0.1:$PORT" ${SERVING_ARGS:-} 2>&1 | tee "$OUT/serving.txt"
  kill -TERM $SERVER; wait $SERVER
fi
if [ "${SKIP_HOST:-0}" != 1 ]; then
  "$PY" "$ROOT/tools/make_json_schemas.py" --count "${SCHEMAS:-50}" --seed 1 > "$OUT/schemas.jsonl"
  "$BIN" bench grammar --tokenizer "$TOK/tokenizer.json" --schemas "$OUT/schemas.jsonl" --walks "$OUT/walks.jsonl" \
    --json "$OUT/radixlm_grammar.json" 2>&1 | tee "$OUT/host.txt"
  if "$PY" -c "import xgrammar" 2>/dev/null; then
    "$PY" "$ROOT/tools/bench_grammar_xgrammar.py" --tokenizer "$TOK/tokenizer.json" --walks "$OUT/walks.jsonl" \
      --radixlm "$OUT/radixlm_grammar.json" 2>&1 | tee -a "$OUT/host.txt"
  else
    echo "xgrammar (Python) not importable: no comparison" | tee -a "$OUT/host.txt"
  fi
fi
rm -rf "$MODEL"
