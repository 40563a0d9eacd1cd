#!/usr/bin/env bash
# bench-comment.yml: one commit status per hardware and one sticky comment, from downloaded artifacts.
# The artifacts are untrusted (a PR can rewrite bench-pr.yml): names are checked against a strict pattern,
# files are only read as data, and the verdict file is parsed by `trainbench gh status`.
# Needs: GITHUB_TOKEN, GITHUB_REPOSITORY, HEAD_SHA; optional HEAD_LABEL (owner:branch), RUN_URL.
set -euo pipefail
dir=${1:?usage: post_bench_results.sh ARTIFACTS_DIR}
cli=("${PYTHON:-python}" -m suite.cli)
bodies=()
shopt -s nullglob
for art in "$dir"/bench-*/; do
  name=$(basename "$art")
  hw=${name#bench-}
  if [[ ! "$hw" =~ ^[A-Za-z0-9._-]{1,40}$ ]]; then
    echo "skipping artifact with an unexpected name: ${name@Q}" >&2
    continue
  fi
  "${cli[@]}" gh status --sha "$HEAD_SHA" --context "trainbench/$hw" --exit-code-file "$art/compare-exit-code" \
    ${RUN_URL:+--target-url "$RUN_URL"}
  if [ -f "$art/report.md" ] && [ ! -L "$art/report.md" ]; then
    bodies+=(--body-file "$art/report.md")
  fi
done
if [ ${#bodies[@]} -eq 0 ]; then
  printf 'TrainBench: the benchmark run produced no report; see %s\n' "${RUN_URL:-the workflow run}" > "$dir/none.md"
  bodies=(--body-file "$dir/none.md")
fi
"${cli[@]}" gh comment --head-sha "$HEAD_SHA" ${HEAD_LABEL:+--head-label "$HEAD_LABEL"} \
  --author "github-actions[bot]" "${bodies[@]}"
