"""`run --profile` writes a Chrome trace of a window after warm-up; NVTX hooks open the right ranges."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from suite.measure.profiling import Nvtx
from suite.results.record import read_result

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "suite.cli", "run", "cv/digits_cnn", "--variant", "tiny", "--threads", "1",
         "--results", str(tmp_path / "results"), "--profile", "--profile-dir", str(tmp_path / "prof"), "--json",
         "--quiet", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_profile_writes_a_chrome_trace_of_the_window(tmp_path):
    out = _run(tmp_path)
    assert out.returncode == 0, out.stderr
    result = read_result(Path(json.loads(out.stdout)[0]["path"]))
    trace = Path(result.config["profile"]["trace"])
    assert trace.is_file() and trace.parent == tmp_path / "prof"
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e.get("name", "") for e in events}
    steps = sorted((n for n in names if n.startswith("ProfilerStep#")), key=lambda n: int(n.split("#")[1]))
    # skip_first=5, warmup=2, active=5: the trace holds exactly the 5 active steps, numbered after warm-up
    assert steps == [f"ProfilerStep#{i}" for i in range(7, 12)], steps
    assert any(n.startswith("aten::") and ("conv" in n or "mm" in n) for n in names)
    assert any("profiled run" in w for w in result.warnings)


def test_profile_too_short_a_run_says_so(tmp_path):
    out = _run(tmp_path, "--set", "budget.max_steps=4")
    assert out.returncode == 0, out.stderr
    result = read_result(Path(json.loads(out.stdout)[0]["path"]))
    assert result.steps == 4
    assert any("before the profiling window" in w for w in result.warnings)
    assert not list(tmp_path.glob("prof/*.json"))


def test_nvtx_ranges_wrap_forward_backward_optimizer(monkeypatch):
    """NVTX itself needs CUDA; the range calls are recorded in its place, the hooks and the step are real."""
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: calls.append(f"push {name}"))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: calls.append("pop"))
    nv = Nvtx(enabled=False)
    nv.enabled = True  # as on a CUDA machine
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    nv.attach(model, opt)
    for step in (1, 2):
        nv.push(f"step {step}")
        opt.zero_grad()
        model(torch.randn(3, 4)).pow(2).mean().backward()
        opt.step()
        nv.step_end()
    with nv.range("eval"), torch.no_grad():
        model(torch.randn(3, 4))
    one_step = ["push step {}", "push forward", "pop", "push backward", "pop", "push optimizer", "pop", "pop"]
    expected = [c.format(1) for c in one_step] + [c.format(2) for c in one_step]
    expected += ["push eval", "push forward", "pop", "pop"]
    assert calls == expected
    nv.detach()
    calls.clear()
    model(torch.randn(3, 4))
    assert calls == [] and nv.depth == 0


def test_nvtx_is_off_without_cuda():
    nv = Nvtx(enabled=True)
    assert nv.enabled == torch.cuda.is_available()
