"""rl/arithmetic_grpo's warm start (issue 42): the supervised phase stops at the first probe check that reaches
`sft_until_accuracy`, so the policy GRPO starts from lands in a stated accuracy band whatever the kernels' rounding
(native, forced AVX2, MKL_CBWR=COMPATIBLE), where a fixed 500 steps scored anywhere from 0.007 to 0.44."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from suite import harness, registry
from suite.specload import load_spec
from suite.workloads.contract import Context

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "workloads" / "rl" / "arithmetic_grpo.yaml"
# the band docs/grpo.md states for the standard spec's warm start on the 128 held-out problems
HELD_OUT_BAND = (0.15, 0.45)


def _workload(overrides: dict):
    spec = load_spec(SPEC, overrides, "tiny")
    return registry.task_class("grpo")(spec, Context(data_root=Path("."), seed=0, device=torch.device("cpu")))


def test_the_supervised_phase_stops_at_the_first_probe_check_that_reaches_the_threshold(monkeypatch):
    w = _workload({"grpo.warm_start.sft_steps": 100, "grpo.warm_start.sft_until_accuracy": 0.25,
                   "grpo.warm_start.sft_check_every": 5, "grpo.warm_start.probe_problems": 40})
    scripted, probes = iter([0.0, 0.1, 0.3, 0.9]), []

    def solve(net, problems, with_rewards=True):
        probes.append(problems)
        assert not with_rewards and not net.training  # scored in eval mode, no reward plug-in in init
        share = next(scripted)
        return [i < share * len(problems) for i in range(len(problems))], [], []

    monkeypatch.setattr(w, "_solve", solve)
    model = w.build_model()
    assert w.warm_start_report == {"sft_steps": 15, "probe_accuracy": 0.3}  # the third check, not the last
    assert model.training
    assert len(probes) == 3 and all(p == probes[0] for p in probes) and len(probes[0]) == 40
    assert not set(probes[0]) & set(w.eval_problems)  # the held-out set never chooses the warm start


def test_without_a_threshold_the_supervised_phase_runs_its_steps_and_never_probes(monkeypatch):
    w = _workload({"grpo.warm_start.sft_steps": 7})
    monkeypatch.setattr(w, "_solve", lambda *a, **k: pytest.fail("probed without sft_until_accuracy"))
    w.build_model()
    assert w.warm_start_report == {"sft_steps": 7, "probe_accuracy": None}


def test_a_warm_start_that_never_reaches_the_threshold_ends_the_run_error_before_the_clock():
    spec = load_spec(SPEC, {"grpo.warm_start.sft_steps": 10, "grpo.warm_start.sft_until_accuracy": 1.0}, "tiny")
    r, _ = harness.run(harness.RunRequest(spec=spec, results_dir=None, threads=1, measure_peak=False))
    assert r.status == "error" and r.steps == 0
    assert "did not reach sft_until_accuracy 1.0 on the 256 probe problems in sft_steps 10" in r.error


WARM_START = """
import json, sys, torch
from pathlib import Path
torch.set_num_threads(1)
from suite import registry
from suite.specload import load_spec
from suite.workloads.contract import Context
spec = load_spec(Path(sys.argv[1]), {})
w = registry.task_class("grpo")(spec, Context(data_root=Path("."), seed=0, device=torch.device("cpu")))
model = w.build_model().eval()
print(json.dumps({**w.warm_start_report, "held_out": w.evaluate(model)["accuracy"]}))
"""
KERNELS = {
    "native": {},
    "forced AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
}


@pytest.mark.slow
def test_the_standard_warm_start_lands_in_its_band_under_every_kernel_path():
    """The standard spec's own warm start under three roundings (their SFT runs differ from step ~100 on): each
    stops on the threshold well inside its step cap and scores inside the band on the held-out problems. Fails
    if the stopping rule is lost (500 fixed steps scored 0.07 with AVX2 forced on this Zen 5; 3000 steps score 1.0).
    ~25 s of CPU per path; the three run side by side."""
    base = {k: v for k, v in os.environ.items() if k not in {k2 for env in KERNELS.values() for k2 in env}}
    base.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    procs = {name: subprocess.Popen([sys.executable, "-c", WARM_START, str(SPEC)], env={**base, **env},
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
             for name, env in KERNELS.items()}
    spec = load_spec(SPEC, {})
    ws = spec.grpo["warm_start"]
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{name}: {err[-2000:]}"
        got = json.loads(out.strip().splitlines()[-1])
        assert got["probe_accuracy"] >= ws["sft_until_accuracy"], (name, got)
        assert got["sft_steps"] < ws["sft_steps"] and got["sft_steps"] % ws["sft_check_every"] == 0, (name, got)
        assert HELD_OUT_BAND[0] <= got["held_out"] <= HELD_OUT_BAND[1], (name, got)
