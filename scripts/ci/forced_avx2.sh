#!/usr/bin/env bash
# `make test`'s second pass (issue 42): on a CPU with AVX-512 (Intel, AMD Zen 4/5), the parity tests once more on
# the AVX2 kernels that an AVX2-only CI machine (AMD Zen 3, older Intel) runs, so a change that is green here is
# green there. ATen, oneDNN and MKL each pick their kernels from the CPU at start-up; these three variables cap
# each at AVX2 (tests/project/test_forced_avx2.py checks that they do). On an AVX2-only CPU the first pass already
# ran those kernels: nothing to do. Run from the repository root; the tests are AVX2_TESTS (the Makefile's).
set -euo pipefail
VENV=${VENV:-.venv}
read -r -a tests <<< "${AVX2_TESTS:-}"
if [ "${#tests[@]}" -eq 0 ]; then
  echo "forced AVX2: no tests named (AVX2_TESTS is empty): skipped"
  exit 0
fi
if ! grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  echo "forced AVX2: this CPU has no AVX-512: make test and make test-slow use its AVX2 kernels already"
  exit 0
fi
echo "forced AVX2: this CPU has AVX-512; the parity tests again on AVX2 kernels (ATEN_CPU_CAPABILITY=avx2" \
     "ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2)"
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
read -r -a args <<< "${AVX2_PYTEST_ARGS:--n 2 --dist loadfile}"
exec "$VENV/bin/pytest" "${args[@]}" "${tests[@]}"
