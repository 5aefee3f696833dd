#!/usr/bin/env bash
# Splits the default model into .smol_a ... .smol_d (18 + 27 + 27 + the rest MiB; each fits one
# device call beside the tracked tree and, for .smol_a, .gpu_deps.tar.xz) with its SHA-256 in
# .smol_d. See tools/gpu_smol.sh. The four folders must be listed in .git/info/exclude.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
f="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
cd "$ROOT"
mkdir -p .smol_a .smol_b .smol_c .smol_d
dd if="$f" of=.smol_a/part bs=1M count=18 status=none
dd if="$f" of=.smol_b/part bs=1M skip=18 count=27 status=none
dd if="$f" of=.smol_c/part bs=1M skip=45 count=27 status=none
dd if="$f" of=.smol_d/part bs=1M skip=72 status=none
sha256sum "$f" | cut -c1-64 > .smol_d/sha256
for d in .smol_a .smol_b .smol_c .smol_d; do grep -qx "/$d/" .git/info/exclude || echo "/$d/" >> .git/info/exclude; done
ls -l .smol_*/part
