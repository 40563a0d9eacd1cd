#!/usr/bin/env bash
# `make mutation`: mutmut 3 over the functions that carry the documented promises (docs/testing.md), then
# the score per module. CPU-heavy: one child at a time; it takes tens of minutes on a 2-core machine, so it
# is not part of .ci/run. Re-running resumes (mutmut caches verdicts in mutants/); `rm -rf mutants` to redo.
set -euo pipefail
cd "$(dirname "$0")/.."
MUTMUT=${MUTMUT:-.venv/bin/mutmut}
PY=${PY:-.venv/bin/python}
# the promise-carrying functions, by mutmut's mutant names (scripts/mutation_targets.txt); arguments replace them
mapfile -t PATTERNS < <(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' scripts/mutation_targets.txt)
# a subset: `make mutation MUTANTS='suite.compare.tta.x__ratio__mutmut_*'` (words, never globbed), or arguments
if [ -n "${MUTANTS:-}" ]; then read -r -a PATTERNS <<< "$MUTANTS"; fi
if [ "$#" -gt 0 ]; then PATTERNS=("$@"); fi
export OMP_NUM_THREADS=1
status=0
nice -n "${MUTATION_NICE:-0}" "$MUTMUT" run --max-children "${MUTATION_CHILDREN:-1}" "${PATTERNS[@]}" || status=$?
"$PY" scripts/mutation_report.py "${PATTERNS[@]}"
# mutmut's own failure (the clean tests failed, no mutant matched a pattern, ...) fails `make mutation`
exit "$status"
