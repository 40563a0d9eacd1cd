#!/usr/bin/env bash
# bench-pr.yml: the throughput A/B gate. Both commits on THIS runner, alternating blocks (`trainbench ab`), then
# `trainbench compare` of head against base with the runner's measured noise floors. Writes report.md,
# report.json and compare-exit-code (0 no regression, 1 regressed, 2 error / nothing comparable) in the cwd.
# Needs BASE_SHA, HEAD_SHA. Optional: WORKLOADS (space-separated), ROUNDS, BACKEND, THREADS, AB_OUT, AB_DEPS
# (install | shared), AB_OFFLINE (1: pip reaches no index, see docs/compare.md), AB_FIND_LINKS (space-separated wheel
# folders), REPO (default .), RUNS_PER_BLOCK, AB_SETS (space-separated --set values), FLOORS (folder of *.floor.json, default baselines),
# NOISE_FLOOR (the floor where no measured one applies), TRAINBENCH (the command, default .venv/bin/trainbench),
# AB_CPUS (a CPU list for taskset: the whole A/B on these cores; lockstep sides take turns, so one core holds a
# --nproc 1 A/B; how docs/compare.md's power figures were measured). tests/compare/test_ab.py runs this very script.
set -euo pipefail
: "${BASE_SHA:?}" "${HEAD_SHA:?}"
read -ra tb <<< "${TRAINBENCH:-.venv/bin/trainbench}"
out=${AB_OUT:-ab}
args=()
for w in ${WORKLOADS:-cv/digits_cnn nlp/topics_gpt}; do args+=(-w "$w"); done
for s in ${AB_SETS:-}; do args+=(--set "$s"); done
if [ -n "${THREADS:-}" ]; then args+=(--threads "$THREADS"); fi
if [ "${AB_OFFLINE:-0}" = 1 ]; then args+=(--offline); fi
for f in ${AB_FIND_LINKS:-}; do args+=(--find-links "$f"); done
if [ -n "${RUNS_PER_BLOCK:-}" ]; then args+=(--runs-per-block "$RUNS_PER_BLOCK"); fi
floors=()
if [ -e "${FLOORS:-baselines}" ]; then floors=(--floors "${FLOORS:-baselines}"); fi
if [ -n "${AB_CPUS:-}" ]; then tb=(taskset -c "$AB_CPUS" "${tb[@]}"); fi
set +e
"${tb[@]}" ab --repo "${REPO:-.}" --base "$BASE_SHA" --head "$HEAD_SHA" --rounds "${ROUNDS:-10}" --backend "${BACKEND:-torch}" \
  --out "$out" --deps "${AB_DEPS:-install}" "${args[@]}"
ab_code=$?
"${tb[@]}" compare --baseline "$out/base" --candidate "$out/head" "${floors[@]}" --format md --out report.md \
  --json-out report.json ${NOISE_FLOOR:+--throughput-noise-floor "$NOISE_FLOOR"}
code=$?
set -e
if [ "$ab_code" -eq 2 ]; then code=2; fi
echo "$code" > compare-exit-code
if [ ! -s report.md ]; then
  printf '## TrainBench A/B (%s)\n\n`trainbench ab` exited %s, compare %s; see the job log.\n' \
    "${BACKEND:-torch}" "$ab_code" "$code" > report.md
fi
echo "A/B verdict: exit $code"
