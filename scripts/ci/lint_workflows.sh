#!/usr/bin/env bash
# actionlint and zizmor over .github/workflows (both must report nothing). Run from the repository root.
set -euo pipefail
VENV=${VENV:-.venv}
files=(.github/workflows/*.yml)
if command -v actionlint >/dev/null 2>&1; then
  actionlint "${files[@]}"
else
  wasm_dir=${ACTIONLINT_WASM_DIR:-$VENV/share/actionlint-wasm/package}
  ACTIONLINT_WASM_DIR=$(realpath -m "$wasm_dir") node scripts/ci/actionlint_wasm.cjs "${files[@]}"
fi
zizmor=$(command -v zizmor || echo "$VENV/bin/zizmor")
"$zizmor" --offline --min-severity low .github/workflows/
echo "workflows: actionlint and zizmor clean"
