#!/usr/bin/env bash
# Installs the registry data packages the CPU tiers train on (no download at run time afterwards).
# Idempotent: each step checks before it installs. PY is the project's venv python.
set -euo pipefail
PY=${PY:-.venv/bin/python}
echo "data: scikit-learn digits come with scikit-learn (nothing to install)"
