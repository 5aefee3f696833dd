#!/usr/bin/env bash
# session call 2: serving matrix with the bf16 KV default
R=$OUT
export LD_LIBRARY_PATH=/tmp/rlmdeps/usr/lib/x86_64-linux-gnu:/tmp/rlmdeps/usr/lib/x86_64-linux-gnu/openblas-pthread:/tmp/rlmdeps/lib/x86_64-linux-gnu
RLM=build-gpu/radixlm OUT=$R/m QUICK=1 MODELS=llama-3.1-8b RUNS="${RUNS:-r128_c256 poisson4}" timeout 570 bash tools/serving_matrix.sh > $R/m.log 2>&1
tail -30 $R/m.log
