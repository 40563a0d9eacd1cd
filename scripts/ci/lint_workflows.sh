#!/usr/bin/env bash
# actionlint and zizmor over .github/workflows (both must report nothing). Run from the repository root.
set -euo pipefail
VENV=${VENV:-.venv}
files=(.github/workflows/*.yml)
if command -v actionlint >/dev/null 2>&1; then
  actionlint "${files[@]}"
else
  ACTIONLINT_WASM_DIR=${ACTIONLINT_WASM_DIR:-$VENV/share/actionlint-wasm/package} node scripts/ci/actionlint_wasm.cjs "${files[@]}"
fi
zizmor=$(command -v zizmor || echo "$VENV/bin/zizmor")
"$zizmor" --offline --min-severity low .github/workflows/
echo "workflows: actionlint and zizmor clean"
