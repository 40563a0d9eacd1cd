"""Issue 42: `make test` runs the parity tests a second time on AVX2 kernels when the CPU has AVX-512
(scripts/ci/forced_avx2.sh), so that a run on Intel or AMD Zen 4/5 sees what an AVX2-only CI machine would. This
checks that the three variables really cap torch's kernels at AVX2, and that the Makefile's list names real tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORCED = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def _has_avx512() -> bool:
    return bool(re.search(r"^flags\s*:.*\bavx512f\b", Path("/proc/cpuinfo").read_text(), re.M))


def test_the_variables_cap_aten_and_onednn_at_avx2():
    """ATen's dispatch and oneDNN's ISA (which decides its bf16/fp16 support, and so DeepSpeed's zero.Init dtype:
    suite/backends/deepspeed/zero3.py) both say AVX2, on any x86 CPU."""
    code = ("import torch; print(torch.backends.cpu.get_cpu_capability(), "
            "bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()), bool(torch.ops.mkldnn._is_mkldnn_fp16_supported()))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **FORCED})
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["AVX2", "False", "False"], p.stdout


def test_the_make_target_names_real_tests_and_runs_them_forced_only_on_avx512(tmp_path):
    text = (ROOT / "Makefile").read_text()
    block = re.search(r"^AVX2_TESTS \?=((?:.*\\\n)*.*)$", text, re.M)
    assert block, "the Makefile has no AVX2_TESTS list"
    ids = block[1].replace("\\\n", " ").split()
    assert any("test_layouts.py" in t for t in ids) and any("test_hf_zero3.py" in t for t in ids), ids
    for test_id in ids:
        path, _, name = test_id.partition("::")
        assert (ROOT / path).is_file(), test_id
        assert not name or re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), re.M), test_id
    assert "bash scripts/ci/forced_avx2.sh" in text
    # the script, with a pytest that reports what it was given
    (tmp_path / "bin").mkdir()
    shim = tmp_path / "bin" / "pytest"
    shim.write_text('#!/bin/sh\necho "ran $ATEN_CPU_CAPABILITY $ONEDNN_MAX_CPU_ISA $MKL_ENABLE_INSTRUCTIONS: $*"\n')
    shim.chmod(0o755)
    env = {**{k: v for k, v in os.environ.items() if k not in FORCED and k != "AVX2_PYTEST_ARGS"}, "VENV": str(tmp_path),
           "AVX2_TESTS": "tests/a.py tests/b.py::t"}
    p = subprocess.run(["bash", "scripts/ci/forced_avx2.sh"], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    if _has_avx512():
        assert "ran avx2 AVX2 AVX2: -n 2 --dist loadfile tests/a.py tests/b.py::t" in p.stdout, p.stdout
    else:
        assert "no AVX-512" in p.stdout and "ran" not in p.stdout, p.stdout
    p = subprocess.run(["bash", "scripts/ci/forced_avx2.sh"], capture_output=True, text=True,
                       env={**env, "AVX2_TESTS": ""}, cwd=ROOT, timeout=60)
    assert p.returncode == 0 and "skipped" in p.stdout and "ran" not in p.stdout, p.stdout
