#!/usr/bin/env bash
# Run a command with a CPU hog beside it: one busy loop per core (HOG_LOOPS to change), at normal priority,
# for as long as the command runs; the loops are killed however the command ends. Used to check that the test
# suite holds on a loaded machine (docs/testing.md, "Timing on a loaded machine"):
#   bash scripts/under_hog.sh make test
# Prints the load average before and after, and exits with the command's status.
set -uo pipefail
loops=${HOG_LOOPS:-$(nproc)}
pids=()
cleanup() { [ "${#pids[@]}" -gt 0 ] && kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for _ in $(seq "$loops"); do
  ( while :; do :; done ) &
  pids+=("$!")
done
echo "under_hog: $loops busy loops (pids ${pids[*]}); load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
start=$(date +%s)
"$@"
status=$?
echo "under_hog: command exited $status after $(( $(date +%s) - start )) s; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit "$status"
