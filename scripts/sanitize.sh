#!/usr/bin/env bash
# Sanitizer run of the whole test suite: a CPU-only build with AddressSanitizer (+ LeakSanitizer)
# and UndefinedBehaviorSanitizer in build-asan/, then ctest over it. The Python tests start the
# sanitized binary (ctest passes RADIXLM_BIN=build-asan/radixlm), so the server and CLI run
# instrumented too. Any report fails the run: the sanitizers halt on the first error, and reports
# of child processes (whose exit codes a test might not look at) are written to
# build-asan/sanitizer-logs/ and make the script fail when any exist.
#
# Usage: scripts/sanitize.sh [extra ctest arguments, e.g. -R json_test]
#   JOBS=N (default: nproc), BUILD=dir (default: build-asan), BUILD_TYPE (default: Debug, so that
#   the run also covers -O0 code generation), SKIP_BUILD=1 reruns the tests; CMAKE_ARGS,
#   EXTRA_CXX_FLAGS and EXTRA_LINK_FLAGS add to the configure line (e.g. the unpacked
#   .gpu_deps.tar.xz of tools/gpu_check.sh on a machine without our Debian libraries).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${BUILD:-build-asan}
JOBS=${JOBS:-$(nproc)}
BUILD_TYPE=${BUILD_TYPE:-Debug}
LOGS="$ROOT/$BUILD/sanitizer-logs"
FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

# LeakSanitizer suppressions (scripts/lsan.supp) name known leaks with the reason; UBSan and ASan
# have none.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_init_order=1:check_initialization_order=1:log_path=$LOGS/asan:log_exe_name=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$LOGS/ubsan:log_exe_name=1"
export LSAN_OPTIONS="suppressions=$ROOT/scripts/lsan.supp:print_suppressions=0"
# The route fuzz test sends 10,000 requests in the normal suite; 2,000 keep it within minutes on
# an instrumented -O0 server, whose generations take seconds each (hence a longer hang limit).
export RADIXLM_FUZZ_INPUTS=${RADIXLM_FUZZ_INPUTS:-2000}
export RADIXLM_FUZZ_TIMEOUT=${RADIXLM_FUZZ_TIMEOUT:-600}
# The end-to-end tests' waits and client timeouts are scaled the same way (tests/python/server_util.py
# `limit`), and each test may run for up to CTEST_TIMEOUT seconds (ctest's default is 1500).
export RADIXLM_TEST_TIME_SCALE=${RADIXLM_TEST_TIME_SCALE:-5}
CTEST_TIMEOUT=${CTEST_TIMEOUT:-7200}

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  # shellcheck disable=SC2086
  cmake -S . -B "$BUILD" -G Ninja -DRADIXLM_CUDA=OFF -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
        -DCMAKE_CXX_FLAGS="$FLAGS ${EXTRA_CXX_FLAGS:-}" -DCMAKE_C_FLAGS="$FLAGS" \
        -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined ${EXTRA_LINK_FLAGS:-}" ${CMAKE_ARGS:-} > /dev/null
  # Test discovery runs the binaries at build time (with the options above; its logs are cleared below).
  mkdir -p "$LOGS"
  cmake --build "$BUILD" -j "$JOBS"
fi
rm -rf "$LOGS" && mkdir -p "$LOGS"
start=$(date +%s)
rc=0
(cd "$BUILD" && ctest --output-on-failure --timeout "$CTEST_TIMEOUT" -j "$JOBS" "$@") || rc=$?
echo "sanitize: ctest took $(( $(date +%s) - start )) s"
if compgen -G "$LOGS/*" > /dev/null; then
  echo "sanitize: sanitizer reports in $LOGS:" >&2
  for f in "$LOGS"/*; do
    echo "==== $f" >&2
    head -n 60 "$f" >&2
  done
  rc=1
fi
exit "$rc"
