#!/usr/bin/env bash
# Tensor parallelism on one multi-GPU machine, after a CUDA build (e.g. tools/gpu_check.sh): every
# check in one call, each under its own time limit, printing as it goes.
#   1. tp_parity_test with its ranks on GPUs (every golden at --tp 2 vs --tp 1),
#   2. tests/python/test_tensor_parallel.py on GPUs: the two-machine tests (--nnodes 2, each
#      "machine" its own GPUs) and the killed-rank / killed-machine tests,
#   3. the Llama-3.1-8B shape decode step at --tp 1 and --tp TP (bench one-batch, batch 1, input
#      512; TP's run also prints the all-reduce table, NCCL vs one-shot, the reference).
# Usage: BUILD=build-gpu TP=2 bash tools/tp_gpu_check.sh   (SKIP=parity, SKIP=tests or SKIP=bench to
# leave a part; PY_LIMIT / PER_TEST_LIMIT: seconds for the Python tests in all / each, 400 / 120)
# NCCL's NVLink multicast stays off (NCCL_NVLS_ENABLE=0). The Python tests need a tokenizer: the
# default model's when models/ has it, else tests/data/tokenizer/smollm2.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
TP=${TP:-2}
SKIP=${SKIP:-}
export NCCL_NVLS_ENABLE=0
export RADIXLM_BIN=$BUILD/radixlm  # the ranks tp_parity_test starts
[ -x "$RADIXLM_BIN" ] || { echo "tp_gpu_check: $RADIXLM_BIN not built"; exit 1; }
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
echo "== $GPUS GPUs"; nvidia-smi -L
[ "$GPUS" -ge "$TP" ] || { echo "tp_gpu_check: --tp $TP needs $TP GPUs"; exit 1; }
FAILED=0
step() {  # name limit_s command...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s)"
  local t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  echo "== $name: rc $rc in $(( $(date +%s) - t0 ))s"
  [ $rc -eq 0 ] || FAILED=1
}

if [[ $SKIP != *tests* ]]; then
  [[ $SKIP == *parity* ]] || step "tp_parity_test --tp $TP on GPUs" 300 env RADIXLM_TP_TEST_DEVICE=cuda RADIXLM_TP_TEST_SIZES="$TP" \
    "$BUILD/tp_parity_test" --gtest_brief=1
  # One test's stall must not eat the others' time: pytest-timeout (on the lent machines) ends it
  # after PER_TEST_LIMIT s with a traceback of where it waited.
  per_test_limit=
  python3 -c "import pytest_timeout" 2>/dev/null && per_test_limit="--timeout=${PER_TEST_LIMIT:-120}"
  tok=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -f "$tok" ] || tok=$ROOT/tests/data/tokenizer/smollm2
  step "test_tensor_parallel.py (two machines, dead rank / machine) on GPUs" "${PY_LIMIT:-400}" env RADIXLM_TP_TEST_DEVICE=cuda \
    RADIXLM_TP_TEST_GPUS="$TP" RADIXLM_TP_TEST_TOKENIZER="$tok" PYTHONUNBUFFERED=1 python3 -m pytest -v -rA \
    -p no:cacheprovider $per_test_limit "$ROOT/tests/python/test_tensor_parallel.py" -k "two_nodes or dead"
  # Leftovers of a test that timed out would hold GPU memory for the runs below.
  pkill -9 -f "$BUILD/radixlm" 2>/dev/null
fi

if [[ $SKIP != *bench* ]]; then
  for tp in 1 "$TP"; do
    step "8B shape, batch 1, --tp $tp" 200 "$RADIXLM_BIN" bench one-batch --model "$ROOT/configs/llama-3.1-8b" \
      --device cuda --batch-size 1 --input-len 512 --output-len 32 --tp "$tp"
  done
fi
echo "== tp_gpu_check: $([ $FAILED -eq 0 ] && echo ok || echo FAILED)"
exit $FAILED
