# llama.cpp for the CPU comparisons (tools/cpu_vs_llamacpp.sh, tools/serve_vs_llamaserver.sh):
# sourced, not run. llama_cpp_build ROOT TARGET... makes sure $LLAMA_BUILD/bin/TARGET exists for
# every TARGET, building llama.cpp from llama-cpp-python's PyPI source distribution
# (vendor/llama.cpp, pinned below) under ROOT/build/llamacpp/ (never committed): native CPU,
# Release, the server without curl or SSL. Sets LLAMA_WORK, LLAMA_SRC and LLAMA_BUILD.
LLAMA_CPP_PYTHON_VERSION=0.3.36  # vendors llama.cpp 0c1e57098

llama_cpp_build() {
  local root=$1
  shift
  LLAMA_WORK=$root/build/llamacpp
  LLAMA_SRC=$LLAMA_WORK/src
  LLAMA_BUILD=$LLAMA_WORK/build
  local missing=()
  local target
  for target in "$@"; do
    [[ -x $LLAMA_BUILD/bin/$target ]] || missing+=("$target")
  done
  [[ ${#missing[@]} == 0 ]] && return 0
  mkdir -p "$LLAMA_WORK"
  if [[ ! -f $LLAMA_SRC/CMakeLists.txt ]]; then
    echo "== downloading llama-cpp-python $LLAMA_CPP_PYTHON_VERSION (source distribution)"
    # --no-binary for the package itself (its build requirements may come as wheels).
    "$root/.venv/bin/pip" download --no-binary llama-cpp-python --no-deps -d "$LLAMA_WORK" \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >/dev/null
    tar -xzf "$LLAMA_WORK/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$LLAMA_WORK"
    rm -rf "$LLAMA_SRC"
    mv "$LLAMA_WORK/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp" "$LLAMA_SRC"
    rm -rf "$LLAMA_WORK/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
  fi
  echo "== building llama.cpp (native CPU, Release): ${missing[*]}"
  cmake -S "$LLAMA_SRC" -B "$LLAMA_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON >/dev/null
  cmake --build "$LLAMA_BUILD" -j2 --target "${missing[@]}" >/dev/null
}

# llama_cpp_q4km MODEL: prints the path of a Q4_K_M file of MODEL (a Q4_1 GGUF) under
# $LLAMA_WORK, made with llama-quantize --allow-requantize when it is missing (after
# llama_cpp_build ... llama-quantize).
llama_cpp_q4km() {
  local out=$LLAMA_WORK/$(basename "${1%.gguf}").Q4_K_M.gguf
  out=${out/.Q4_1.Q4_K_M/.Q4_K_M}
  if [[ ! -f $out ]]; then
    echo "== llama-quantize --allow-requantize $1 -> $out (Q4_K_M)" >&2
    "$LLAMA_BUILD/bin/llama-quantize" --allow-requantize "$1" "$out" Q4_K_M 2 >/dev/null 2>&1
  fi
  echo "$out"
}
