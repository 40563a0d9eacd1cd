#!/usr/bin/env bash
# bisect.yml: post the bisect's Markdown result on the change point's issue, one sticky comment per issue (a rerun
# updates it). Needs: GITHUB_TOKEN, GITHUB_REPOSITORY, ISSUE, RESULT (bisect.md; missing when the bisect failed).
# tests/github/test_bisect_post.py runs this very script against the local GitHub test server.
set -euo pipefail
: "${ISSUE:?}" "${RESULT:?}"
cli=("${PYTHON:-python}" -m suite.cli)
if [[ ! "$ISSUE" =~ ^[0-9]{1,9}$ ]]; then
  echo "ISSUE ${ISSUE@Q}: not an issue number" >&2
  exit 2
fi
body="$RESULT"
if [ ! -f "$RESULT" ] || [ -L "$RESULT" ]; then
  body=$(mktemp)
  printf '### TrainBench bisect\n\nThe bisect produced no result; see %s\n' "${RUN_URL:-the workflow run}" > "$body"
fi
"${cli[@]}" gh comment --issue "$ISSUE" --marker bisect --author "github-actions[bot]" --body-file "$body"
