#!/usr/bin/env bash
# One-shot GPU check: configure + build radixlm with CUDA (Release), record nvidia-smi, run every
# tests/cuda test binary (each source tests/cuda/<name>_test.{cpp,cu} gives a binary <name>_test in
# the build dir) and the CPU unit tests through ctest, tee all logs into $OUT, and print a summary
# table LAST. Keeps going after a failing build target or test binary; exits 1 if anything failed.
#
# Usage (from anywhere; the repo root is found from this script's path):
#   OUT=/some/dir bash tools/gpu_check.sh            # build dir: <repo>/build-gpu
#   OUT=/some/dir JOBS=16 ARCHS=90a BUILD=/tmp/b bash tools/gpu_check.sh
#   SKIP_BUILD=1 ... reruns the tests on an existing build dir; SKIP_CTEST=1 skips the CPU suites,
#   SKIP_TESTS=1 the CUDA test binaries (benchmarks only); TARGETS="fp8_cuda_test radixlm" builds
#   only those targets and runs only the CUDA test binaries among them.
# Build dependencies: when .gpu_deps.tar.xz (tools/gpu_deps_pack.sh, made on a machine set up by
# scripts/setup.sh) is in the repo root, it is unpacked to /tmp/rlmdeps and used (headers, shared
# libraries, pkg-config files, pkgconf) — the lent H100 has CUDA, CMake, ninja and g++ but not our
# Debian libraries. BENCH=0 skips the benchmarks section; BENCH_ONLY=attention,models,offline,quant,fp8
# (any subset, comma-separated) picks benchmark sets. quant (GGUF-quantized Llama-3.1-8B shapes) and
# fp8 (FP8 weights + FP8 KV vs bf16 weights + bf16 KV, Llama-3.1-8B shape, batch 1/32/128/256, each
# with its floor and same-run GEMM references; about 5 minutes) are best run on their own, e.g.
# SKIP_BUILD=1 SKIP_CTEST=1 SKIP_TESTS=1 BENCH_ONLY=fp8.
# CMAKE_ARGS="-DRADIXLM_KERNEL_TIMELINE=ON" adds configure options (here: the timeline profiling build;
# CMake caches it in the build dir, so pass -DRADIXLM_KERNEL_TIMELINE=OFF, or another BUILD, to go back).
# Time limits (seconds): build 330 (BUILD_TIMEOUT), each CUDA binary 150, ctest 150 — well under 8 minutes total.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/out/gpu_check}
BUILD=${BUILD:-$ROOT/build-gpu}
JOBS=${JOBS:-16}
ARCHS=${ARCHS:-90a}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
FAILED=0
T0=$(date +%s)

row() {  # name status detail
  printf '%-42s %-8s %s\n' "$1" "$2" "$3" >> "$SUMMARY"
}
elapsed() { echo $(( $(date +%s) - T0 ))s; }

echo "== nvidia-smi"
nvidia-smi 2>&1 | tee "$OUT/nvidia-smi.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1 || true
command -v nvcc >/dev/null && nvcc --version > "$OUT/nvcc.txt" 2>&1
[ -x /usr/local/cuda/bin/nvcc ] && /usr/local/cuda/bin/nvcc --version >> "$OUT/nvcc.txt" 2>&1

CMAKE_EXTRA=(${CMAKE_ARGS:-})
DEPS_TAR=${DEPS_TAR:-$ROOT/.gpu_deps.tar.xz}
if [ -f "$DEPS_TAR" ]; then
  DEPS=/tmp/rlmdeps
  mkdir -p "$DEPS" && tar -C "$DEPS" -xJf "$DEPS_TAR"
  ARCHLIB=x86_64-linux-gnu
  export LD_LIBRARY_PATH="$DEPS/usr/lib/$ARCHLIB:$DEPS/usr/lib/$ARCHLIB/openblas-pthread:$DEPS/lib/$ARCHLIB:${LD_LIBRARY_PATH:-}"
  export PKG_CONFIG_LIBDIR="$DEPS/usr/lib/$ARCHLIB/pkgconfig:$DEPS/usr/lib/$ARCHLIB/openblas-pthread/pkgconfig:$DEPS/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$DEPS"
  CMAKE_EXTRA+=(-DCMAKE_PREFIX_PATH="$DEPS/usr" -DPKG_CONFIG_EXECUTABLE="$DEPS/usr/bin/pkgconf"
               -DCMAKE_CXX_FLAGS="-isystem $DEPS/usr/include"
               -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$DEPS/usr/lib/$ARCHLIB:$DEPS/lib/$ARCHLIB"
               -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$DEPS/usr/lib/$ARCHLIB:$DEPS/lib/$ARCHLIB")
  row deps ok "unpacked $(basename "$DEPS_TAR") into $DEPS"
fi

if [ "${SKIP_BUILD:-0}" = 1 ]; then
  row build skipped "SKIP_BUILD=1"
else
echo "== configure ($(elapsed))"
if cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRADIXLM_CUDA=ON \
     -DRADIXLM_CUDA_ARCHS="$ARCHS" "${CMAKE_EXTRA[@]}" > "$OUT/configure.log" 2>&1; then
  row configure ok "$(grep -m1 'CUDA backend' "$OUT/configure.log" | sed 's/^-- //')"
else
  tail -30 "$OUT/configure.log"
  row configure FAIL "see configure.log"
  FAILED=1
fi

echo "== build -j$JOBS ($(elapsed))"
# -k 0: keep building the other targets after a failure, so one broken test does not hide the rest.
TARGET_ARGS=()
for t in ${TARGETS:-}; do TARGET_ARGS+=(--target "$t"); done
timeout "${BUILD_TIMEOUT:-330}" cmake --build "$BUILD" -j "$JOBS" "${TARGET_ARGS[@]}" -- -k 0 > "$OUT/build.log" 2>&1
BUILD_RC=$?
grep -E 'error:|error :|FAILED:|Error' "$OUT/build.log" | head -40
if [ $BUILD_RC -eq 0 ]; then
  row build ok "$(elapsed)"
else
  row build FAIL "rc $BUILD_RC ($( [ $BUILD_RC -eq 124 ] && echo timeout || echo errors), see build.log)"
  FAILED=1
fi
fi

# gtest's final lines: "[  PASSED  ] N tests.", "[  FAILED  ] N tests, listed below:", "[  SKIPPED ] N ..."
gtest_count() {  # log tag
  grep -E "^\[  $2 *\] [0-9]+ test" "$1" | tail -1 | sed -E 's/^\[[^]]*\] ([0-9]+) .*/\1/'
}

echo "== CUDA test binaries ($(elapsed))"
shopt -s nullglob
TEST_SOURCES=("$ROOT"/tests/cuda/*_test.cpp "$ROOT"/tests/cuda/*_test.cu)
if [ "${SKIP_TESTS:-0}" = 1 ]; then TEST_SOURCES=(); row cuda-tests skipped "SKIP_TESTS=1"; fi
for src in "${TEST_SOURCES[@]}"; do
  name=$(basename "$src"); name=${name%.*}
  if [ -n "${TARGETS:-}" ] && [[ " $TARGETS " != *" $name "* ]]; then continue; fi
  bin="$BUILD/$name"
  log="$OUT/$name.log"
  if [ ! -x "$bin" ]; then
    row "$name" MISSING "not built (see build.log)"
    FAILED=1
    continue
  fi
  echo "-- $name"
  timeout 150 "$bin" --gtest_color=no > "$log" 2>&1
  rc=$?
  grep -E '^\[  FAILED  \]|Failure$|^unknown file|error:|Expected|Which is|random seed' "$log" | head -60
  tail -3 "$log"
  pass=$(gtest_count "$log" PASSED); fail=$(gtest_count "$log" FAILED); skip=$(gtest_count "$log" SKIPPED)
  detail="passed ${pass:-0}, failed ${fail:-0}, skipped ${skip:-0}"
  if [ $rc -eq 0 ] && [ "${pass:-0}" = 0 ] && [ "${skip:-0}" != 0 ]; then
    row "$name" SKIPPED "$detail (no CUDA device visible?)"
    FAILED=1
  elif [ $rc -eq 0 ] && [ -n "$pass" ]; then
    row "$name" ok "$detail"
  else
    row "$name" FAIL "$detail, rc $rc$( [ $rc -eq 124 ] && echo ' (timeout)')"
    FAILED=1
  fi
done

if [ "${SKIP_CTEST:-0}" = 1 ]; then
  row ctest-cpu skipped "SKIP_CTEST=1 (the CPU suites run in CI)"
else
echo "== ctest: CPU unit tests ($(elapsed))"
# CUDA suites are run above (their gtest suite names contain "Cuda"); py_ tests need the venv.
(cd "$BUILD" && timeout 150 ctest -j "$JOBS" --output-on-failure --timeout 120 -E '^py_|Cuda') > "$OUT/ctest.log" 2>&1
rc=$?
grep -E 'tests passed|\*\*\*Failed|\*\*\*Timeout|Exception|Not Run' "$OUT/ctest.log" | head -40
line=$(grep -E 'tests passed' "$OUT/ctest.log" | tail -1)
if [ $rc -eq 0 ]; then
  row ctest-cpu ok "${line:-no summary line}"
else
  row ctest-cpu FAIL "${line:-no summary line}, rc $rc$( [ $rc -eq 124 ] && echo ' (timeout)')"
  FAILED=1
fi
fi


if [ "${BENCH:-1}" = 1 ] && [ -x "$BUILD/radixlm" ]; then
  echo "== benchmarks ($(elapsed))"
  RLM="$BUILD/radixlm"
  bench_row() {  # name log pattern
    local v; v=$(grep -E "$3" "$2" | tail -3 | tr '\n' ' ' | sed 's/  */ /g')
    if [ -n "$v" ]; then row "$1" ok "${v:0:400}"; else row "$1" FAIL "see $(basename "$2")"; FAILED=1; fi
    tail -1 "$SUMMARY"  # as it happens, so a run cut short still shows it
  }
  # BENCH_ONLY: a comma list of the sets to run, attention (kernels, cascade, PyTorch SDPA),
  # models (bench one-batch, GEMV), quant (bench one-batch with random GGUF blocks), offline (bench
  # offline vs transformers.generate), fp8 (one-batch with FP8 weights and KV against bf16 at the
  # decode batch sizes); default all.
  want() { [ "${BENCH_ONLY:-all}" = all ] || [[ ",${BENCH_ONLY}," == *",$1,"* ]]; }
  if want attention; then
  timeout 200 "$RLM" bench attention --json "$OUT/attn.json" > "$OUT/bench_attention.log" 2>&1
  bench_row bench-attention "$OUT/bench_attention.log" 'ratio|TFLOP'
  timeout 200 python3 "$ROOT/tools/sdpa_bench.py" --json "$OUT/sdpa.json" > "$OUT/sdpa.log" 2>&1
  bench_row sdpa "$OUT/sdpa.log" 'TFLOP|tflops'
  bench_row bench-cascade "$OUT/bench_attention.log" '^  [0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ '
  fi
  if want models; then
  for spec in "llama-3.1-8b 1" "qwen3-0.6b 1" "qwen3-0.6b 32"; do
    set -- $spec
    log="$OUT/one_batch_$1_bs$2.log"
    timeout 240 "$RLM" bench one-batch --model "$ROOT/configs/$1" --device cuda --batch-size "$2" --input-len 512 \
      --output-len 32 > "$log" 2>&1
    bench_row "one-batch $1 bs$2" "$log" 'decode step|floor'
  done
  # The same 8B step with the small-m GEMV kernel off (cuBLAS for every linear), and the GEMMs alone.
  log="$OUT/one_batch_llama-3.1-8b_bs1_cublas.log"
  RADIXLM_LINEAR_GEMV=0 timeout 240 "$RLM" bench one-batch --model "$ROOT/configs/llama-3.1-8b" --device cuda \
    --batch-size 1 --input-len 512 --output-len 32 > "$log" 2>&1
  bench_row "one-batch llama-3.1-8b bs1 cublas" "$log" 'decode step \(|floor'
  timeout 200 "$RLM" bench gemv --m 1,4 > "$OUT/bench_gemv.log" 2>&1
  bench_row bench-gemv "$OUT/bench_gemv.log" 'step|total|sum'
  if [ -d "$ROOT/configs/qwen3-next-shape-12l" ]; then
    log="$OUT/one_batch_qwen3next.log"
    timeout 120 "$RLM" bench one-batch --model "$ROOT/configs/qwen3-next-shape-12l" --device cuda --batch-size 1 \
      --input-len 512 --output-len 16 > "$log" 2>&1
    bench_row "one-batch qwen3-next-12l bs1" "$log" 'decode step|floor'
  fi
  fi
  if want quant; then
  # GGUF block-quantized weights kept quantized (random blocks of each type, Llama-3.1-8B shape):
  # decode (GEMV, m <= 8) against the quantized-bytes floor, and prefill (bf16 dequant + cuBLAS).
  for spec in "q4_k 1" "q4_k 8" "q8_0 1" "q6_k 1" "q4_0 1"; do
    set -- $spec
    log="$OUT/one_batch_llama-3.1-8b_$1_bs$2.log"
    timeout 240 "$RLM" bench one-batch --model "$ROOT/configs/llama-3.1-8b" --device cuda --dummy-weight-type "$1" \
      --batch-size "$2" --input-len 512 --output-len 32 > "$log" 2>&1
    bench_row "one-batch 8b $1 bs$2" "$log" 'prefill|decode step \(|floor'
  done
  fi
  if want fp8; then
  for spec in "fp8 1" "fp8 32" "fp8 128" "fp8 256" "bf16 1" "bf16 32" "bf16 128" "bf16 256"; do
    set -- $spec
    log="$OUT/one_batch_llama-3.1-8b_$1_bs$2.log"
    if [ "$1" = fp8 ]; then flags=(--quantization fp8 --kv-cache-dtype fp8_e4m3); else flags=(--kv-cache-dtype bf16); fi
    timeout 240 "$RLM" bench one-batch --model "$ROOT/configs/llama-3.1-8b" --device cuda --batch-size "$2" \
      --input-len 512 --output-len 32 "${flags[@]}" > "$log" 2>&1
    bench_row "one-batch llama-3.1-8b $1 bs$2" "$log" 'decode step \(|floor|gemm reference m [0-9]+ '
  done
  fi
  if want offline; then
  # Offline throughput vs transformers.generate on the same prompts (Qwen3-0.6B shape, random weights).
  log="$OUT/offline_radixlm.log"
  timeout 240 "$RLM" bench offline --model "$ROOT/configs/qwen3-0.6b" --device cuda --num-prompts 128 --input-len 256 \
    --output-len 64 --random-range-ratio 0.5 --max-running-requests 64 --dataset-out "$OUT/offline_ds.json" \
    --result-out "$OUT/offline_radixlm.json" > "$log" 2>&1
  bench_row "offline radixlm" "$log" 'throughput'
  timeout 300 python3 "$ROOT/tools/hf_offline_bench.py" --model "$ROOT/configs/qwen3-0.6b" --dataset "$OUT/offline_ds.json" \
    --device cuda --dtype bfloat16 --batch-size 64 --result-out "$OUT/offline_hf.json" > "$OUT/offline_hf.log" 2>&1
  bench_row "offline transformers" "$OUT/offline_hf.log" 'output_throughput'
  if [ -f "$OUT/offline_radixlm.json" ] && [ -f "$OUT/offline_hf.json" ]; then
    ratio=$(python3 -c "import json;a=json.load(open('$OUT/offline_radixlm.json'));b=json.load(open('$OUT/offline_hf.json'));print(f\"{a['output_throughput']/b['output_throughput']:.2f}\")")
    row "offline radixlm/transformers" ok "output throughput ratio $ratio"
  fi
  fi
fi

row total "$( [ $FAILED -eq 0 ] && echo ok || echo FAIL )" "$(elapsed)"
echo
echo "== summary (logs in $OUT)"
cat "$SUMMARY"
exit $FAILED
