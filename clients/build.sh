#!/usr/bin/env bash
# The client packages, built from the committed spec (openapi/openapi.json beside clients/):
# `clients/build.sh [PYTHON] [OUT]` generates clients/python/htm_client and
# clients/typescript/src/schema.d.ts, then writes the wheel (htm_client-<v>-py3-none-any.whl)
# and the npm tarball (htm-client-<v>.tgz) to OUT (default clients/dist). `make clients` runs
# it; so do tests/clients/test_packages.py (on a copy) and .github/workflows/release.yml.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${1:-python3}
case $python in */*) python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python") ;; esac
out=$(mkdir -p "${2:-$here/dist}" && cd "${2:-$here/dist}" && pwd)
spec=$here/../openapi/openapi.json

cd "$here/python"
rm -rf htm_client build
"$python" -m openapi_python_client generate --path "$spec" --config generate.yml \
    --meta none --output-path htm_client >/dev/null
"$python" -m pip wheel --no-deps -q -w "$out" .

cd "$here/typescript"
npm ci --no-audit --no-fund --loglevel=error >/dev/null
npm run --silent generate >/dev/null
npm run --silent build
npm pack --silent --pack-destination "$out" >/dev/null
ls "$out"
