#!/usr/bin/env bash
# Fits the working tree under the device tool's 64 MiB limit for a GPU call, and puts it back:
#   bash tools/gpu_tree.sh trim [KEEP...]   moves the test data a GPU call does not need to $HOLD
#   bash tools/gpu_tree.sh restore          moves it back (never over an existing path)
#   bash tools/gpu_tree.sh size             the bytes the device tool counts (tracked, and untracked
#                                           not ignored), without what a call carries
# Moved by `trim`: tests/golden/* except index.json, llama_gqa1_hd64 and llama_gqa2_hd64_tied (which
# tools/gpu_run_prebuilt.sh's generate check reads), tests/data/chat_templates, tests/data/fp8/*,
# and tests/data/tokenizer/* except smollm2 and generated/ (ignored); with ALL=1 those exceptions
# too. KEEP: more of those paths to leave in place, e.g. tests/data/fp8/llama_ct_channel_dynamic.
# HOLD (default /tmp/radixlm_gpu_hold) lists what it holds in $HOLD/manifest; `trim` refuses to run
# while a previous trim is not restored. A call carrying a prebuilt binary with its libraries
# (~28 MB, or ~51 MB with test binaries) needs ALL=1.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HOLD=${HOLD:-/tmp/radixlm_gpu_hold}
cd "$ROOT"
size() { git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1; }
case "${1:-}" in
  trim)
    shift
    if [ -e "$HOLD/manifest" ]; then echo "gpu_tree: $HOLD holds a previous trim: restore first" >&2; exit 1; fi
    keep=" tests/data/tokenizer/generated $* "
    if [ "${ALL:-0}" != 1 ]; then
      keep+=" tests/golden/index.json tests/golden/llama_gqa1_hd64 tests/golden/llama_gqa2_hd64_tied"
      keep+=" tests/data/tokenizer/smollm2 "
    fi
    mkdir -p "$HOLD"
    : > "$HOLD/manifest"
    for p in tests/golden/* tests/data/chat_templates tests/data/fp8/* tests/data/tokenizer/*; do
      [ -e "$p" ] || continue
      case "$keep" in *" $p "*) continue ;; esac
      mkdir -p "$HOLD/$(dirname "$p")"
      mv "$p" "$HOLD/$p"
      echo "$p" >> "$HOLD/manifest"
    done
    echo "gpu_tree: $(wc -l < "$HOLD/manifest") paths held in $HOLD; $(size) bytes left in the tree"
    ;;
  restore)
    [ -e "$HOLD/manifest" ] || { echo "gpu_tree: nothing held in $HOLD"; exit 0; }
    left=0
    while IFS= read -r p; do
      if [ -e "$p" ]; then echo "gpu_tree: $p exists in the tree; its held copy stays in $HOLD" >&2; left=1; continue; fi
      mkdir -p "$(dirname "$p")"
      mv "$HOLD/$p" "$p"
    done < "$HOLD/manifest"
    [ "$left" = 0 ] || exit 1
    rm -rf "$HOLD"
    echo "gpu_tree: restored; $(size) bytes in the tree"
    ;;
  size) size ;;
  *) sed -n 2,13p "$0"; exit 2 ;;
esac
