#!/usr/bin/env bash
# nightly.yml: append new result files and their side-cars (*.mllog, a diffusion run's *.samples.png) to the `results` branch
# (created on first use). Append-only: a
# file that already exists there is never replaced; a different file under an existing name fails the job.
# Usage: publish_results.sh DIR (holding one folder per downloaded artifact, each with results under it).
# Needs GITHUB_TOKEN and GITHUB_REPOSITORY; REMOTE_URL overrides the remote (tests use a local bare repo).
set -euo pipefail
src=${1:?usage: publish_results.sh DIR}
branch=${RESULTS_BRANCH:-results}
remote=${REMOTE_URL:-${GITHUB_SERVER_URL:-https://github.com}/${GITHUB_REPOSITORY:?}.git}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git_auth=()
if [ -n "${GITHUB_TOKEN:-}" ] && [[ "$remote" == https://* ]]; then
  # the token goes in a header for these git calls only: never in the URL, never in .git/config
  basic=$(printf 'x-access-token:%s' "$GITHUB_TOKEN" | base64 -w0)
  echo "::add-mask::$basic"
  git_auth=(-c "http.extraheader=AUTHORIZATION: basic $basic")
fi
git init -q "$work"
cd "$work"
git config user.name "trainbench-nightly"
git config user.email "trainbench-nightly@users.noreply.github.com"
if git "${git_auth[@]}" fetch -q --depth 1 "$remote" "$branch" 2>/dev/null; then
  git checkout -q -b "$branch" FETCH_HEAD
else
  git checkout -q --orphan "$branch"
  mkdir -p results
  printf '# TrainBench results\n\nAppend-only result files written by the nightly workflow (docs/ci.md).\n' > README.md
fi
added=0
while IFS= read -r -d '' f; do
  rel=${f#"$src"/}
  rel=${rel#*/}          # drop the artifact folder (nightly-<hardware>/)
  rel=${rel#results/}
  dest="results/$rel"
  if [ -e "$dest" ]; then
    cmp -s "$f" "$dest" || { echo "refusing to replace $dest with different content" >&2; exit 1; }
    continue
  fi
  mkdir -p "$(dirname "$dest")"
  cp "$f" "$dest"
  added=$((added + 1))
done < <(find "$src" -type f \( -name '*.json' -o -name '*.mllog' -o -name '*.log' -o \( -name '*.samples.png' -size -16777216c \) \) -print0)
git add -A
if git diff --cached --quiet; then
  echo "results: nothing new"
  exit 0
fi
git commit -q -m "nightly: $added result file(s) from ${GITHUB_RUN_ID:-a local run}"
git "${git_auth[@]}" push -q "$remote" "HEAD:refs/heads/$branch"
echo "results: appended $added file(s) to $branch"
