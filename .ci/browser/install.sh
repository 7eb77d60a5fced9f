#!/usr/bin/env bash
# Idempotent setup for the browser tests (.ci/browser). Everything comes from
# package registries: chromium + chromium-driver + fonts from Debian, Selenium
# from PyPI (pinned in .ci/requirements-browser.txt), axe-core from npm (pinned
# below). Nothing downloads a browser or a driver at run time.
#
# Usage: bash .ci/browser/install.sh      (from the repo root or anywhere)
# Leaves: .ci/tmp/browser-venv (python), .ci/tmp/axe/node_modules/axe-core
set -euo pipefail
# `retry` comes from .ci/run (three attempts at an install); run alone, once.
type retry >/dev/null 2>&1 || retry() { "$@"; }
cd "$(dirname "$0")/../.."

AXE_VERSION="4.14.1"
# Fonts: DejaVu + Liberation (Latin/Greek/Cyrillic, Arial/Times metrics),
# WenQuanYi Micro Hei (CJK, 5 MB; fonts-noto-cjk is 90 MB) and Noto Color Emoji:
# without them screenshots show tofu boxes for CJK text and emoji.
DEBS=(chromium chromium-driver fonts-dejavu-core fonts-liberation fonts-wqy-microhei fonts-noto-color-emoji)

missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "browser install: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  retry apt-get update -qq
  retry apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "browser install: Debian packages already installed (${DEBS[*]})"
fi
command -v chromium >/dev/null || { echo "FATAL: chromium not on PATH after install" >&2; exit 1; }
command -v chromedriver >/dev/null || { echo "FATAL: chromedriver not on PATH after install" >&2; exit 1; }

if [ ! -x .ci/tmp/browser-venv/bin/python ]; then
  python3 -m venv .ci/tmp/browser-venv
fi
retry .ci/tmp/browser-venv/bin/pip install --quiet --disable-pip-version-check -r .ci/requirements-browser.txt

if [ "$(node -p "try{require('./.ci/tmp/axe/node_modules/axe-core/package.json').version}catch(e){''}")" != "$AXE_VERSION" ]; then
  mkdir -p .ci/tmp/axe
  retry npm install --prefix .ci/tmp/axe --no-audit --no-fund --loglevel=error --no-save "axe-core@${AXE_VERSION}"
fi
test -f .ci/tmp/axe/node_modules/axe-core/axe.min.js || { echo "FATAL: axe.min.js missing" >&2; exit 1; }

echo "chromium:     $(chromium --version 2>/dev/null)"
echo "chromedriver: $(chromedriver --version)"
echo "selenium:     $(.ci/tmp/browser-venv/bin/python -c 'import selenium; print(selenium.__version__)')"
echo "axe-core:     $(node -p "require('./.ci/tmp/axe/node_modules/axe-core/package.json').version")"
