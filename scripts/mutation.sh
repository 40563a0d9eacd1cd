#!/usr/bin/env bash
# `make mutation`: mutmut 3 over the functions that carry the documented promises (docs/testing.md), then
# the score per module. CPU-heavy: one child at a time; it takes tens of minutes on a 2-core machine, so it
# is not part of .ci/run. Re-running resumes (mutmut caches verdicts in mutants/); `rm -rf mutants` to redo.
set -euo pipefail
cd "$(dirname "$0")/.."
MUTMUT=${MUTMUT:-.venv/bin/mutmut}
PY=${PY:-.venv/bin/python}
# the promise-carrying functions, by mutmut's mutant names (module.x_function / module.xǁClassǁmethod)
PATTERNS=(
  # the atomic, append-only write and its read
  "suite.results.x_write_atomic__mutmut_*" "suite.results.x_write_run__mutmut_*" "suite.results.x_read_result__mutmut_*"
  # stats: the one aggregation and the rank test compare uses
  "suite.stats.x_olympic_mean__mutmut_*" "suite.stats.x_spread__mutmut_*" "suite.stats.x_tta_or_inf__mutmut_*"
  "suite.stats.x_midranks__mutmut_*" "suite.stats.x_mann_whitney_u__mutmut_*" "suite.stats.x__exact_p__mutmut_*"
  # compare: the verdict with the noise floor as margin, the pairing, the floor's source
  "suite.compare.x_compare_metric__mutmut_*" "suite.compare.x__compare_pair__mutmut_*" "suite.compare.x__ratio__mutmut_*"
  # measurement: steady throughput (warm-up left out), MFU, step-time statistics
  "suite.measure.metrics.x_steady_samples_per_s__mutmut_*" "suite.measure.metrics.x_utilization__mutmut_*"
  "suite.measure.metrics.x_model_flops_per_s__mutmut_*" "suite.measure.metrics.x_step_time_summary__mutmut_*"
  "suite.measure.metrics.x_throughput__mutmut_*"
  # the site's escaping (autoescape for every template, the hand-built table rows, cell text)
  "suite.site.build.x__env__mutmut_*" "suite.site.render.x_kv_rows__mutmut_*" "suite.site.data.x_cell_text__mutmut_*"
  # GitHub: secret redaction, the token that never shows, input checks before any request, safe unzip
  "suite.github.x_redact__mutmut_*" "suite.github.x_register_secret__mutmut_*" "suite.github.xǁ_TokenAuthǁ*"
  "suite.github.x__check_repo__mutmut_*" "suite.github.x__check_sha__mutmut_*" "suite.github.x_safe_extract__mutmut_*"
)
if [ "$#" -gt 0 ]; then PATTERNS=("$@"); fi
export OMP_NUM_THREADS=1
nice -n "${MUTATION_NICE:-0}" "$MUTMUT" run --max-children "${MUTATION_CHILDREN:-1}" "${PATTERNS[@]}" || true
"$PY" scripts/mutation_report.py "${PATTERNS[@]}"
