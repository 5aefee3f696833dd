#!/usr/bin/env bash
# session call 1: build + CUDA tests + quant bench
R=$OUT
rm -rf build-gpu; OUT=$R/check SKIP_CTEST=1 BENCH=0 BUILD_TIMEOUT=330 bash tools/gpu_check.sh > $R/check.log 2>&1
cat $R/check/summary.txt
export LD_LIBRARY_PATH=/tmp/rlmdeps/usr/lib/x86_64-linux-gnu:/tmp/rlmdeps/usr/lib/x86_64-linux-gnu/openblas-pthread:/tmp/rlmdeps/lib/x86_64-linux-gnu
OUT=$R/q SKIP_BUILD=1 SKIP_CTEST=1 SKIP_TESTS=1 BENCH_ONLY=quant timeout 200 bash tools/gpu_check.sh > $R/q.log 2>&1
tail -8 $R/q/summary.txt
for f in $R/q/one_batch_*.log; do echo "== $f"; grep -E "model|prefill|decode step|floor" $f | head -6; done
