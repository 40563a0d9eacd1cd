"""`run`'s options are one typed object (suite/run_flags.py, issue 43): `run` builds it from its flags, `study`
launches through it, `ab` and `bisect` write each block's `trainbench run` from it. Its flags round-trip through
`run`'s own parser, and every flag of `run` is a field with the same default."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

from suite.cli import app
from suite.cli import run as run_cli
from suite.compare import ab as ab_mod
from suite.compare import ab_plan
from suite.run_flags import RunFlags

RENAMED = {"set_": "sets", "compile_": "compile", "json_": "json"}  # Python keywords and names typer must not shadow


def _parsed(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> RunFlags:
    seen: list[RunFlags] = []
    monkeypatch.setattr(run_cli, "execute", seen.append)
    app(["run", *argv], standalone_mode=False)
    (o,) = seen
    return o


def test_every_flag_of_run_is_a_field_with_the_same_default() -> None:
    params = inspect.signature(run_cli.run).parameters
    fields = {f.name: f for f in dataclasses.fields(RunFlags)}
    assert {RENAMED.get(p, p) for p in params} == set(fields)
    made = RunFlags()
    for name, p in params.items():
        default = p.default if p.default is not None or name not in ("workloads", "set_", "slurm") else []
        assert getattr(made, RENAMED.get(name, name)) == default, name


def test_the_flags_of_an_options_object_parse_back_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    o = RunFlags(workloads=["cv/digits_cnn", "nlp/topics_llama"], tier="smoke", backend="deepspeed", seeds=3, seed=7,
                   sets=["optimizer.lr=0.01", "data.batch_size=8"], variant="tiny", precision="bf16", compile=False,
                   threads=2, nproc=2, results=Path("elsewhere"), json=True, quiet=True, fail_fast=True,
                   executor="local", jobs=2, address="10.0.0.1:6379", profile=True, profile_dir=Path("traces"),
                   nvtx=True, peak_tflops=12.5, attention_flops="causal", mlperf_org="Lab", mlperf_division="closed",
                   algo="lion", mode="throughput", isolate=False, parallel="tp=2", ac="full", nnodes=2, node_rank=1,
                   rdzv_endpoint="host:29500", slurm=["partition=gpu"], checkpoint_every="30s", max_restarts=1)
    assert _parsed(monkeypatch, o.argv()) == o
    assert _parsed(monkeypatch, ["cv/digits_cnn"]) == RunFlags(workloads=["cv/digits_cnn"])
    assert _parsed(monkeypatch, RunFlags(compile=True).argv()).compile is True


def test_check_names_the_flag() -> None:
    RunFlags().check()
    for bad, flag in ((dict(mode="fast"), "--mode 'fast'"), (dict(peak_tflops=0.0), "--peak-tflops 0.0"),
                      (dict(attention_flops="half"), "--attention-flops"), (dict(mlperf_division="x"), "--mlperf-division"),
                      (dict(mlperf_org=" "), "--mlperf-org")):
        with pytest.raises(ValueError, match=flag):
            RunFlags(**bad).check()


def test_an_ab_block_runs_the_command_it_ran_before(tmp_path: Path) -> None:
    plan = ab_plan.ABPlan(repo=tmp_path, out=tmp_path / "ab", workloads=["cv/digits_cnn"], backend="torch", threads=2,
                         sets=["throughput.measure_steps=30"], nproc=2, runs_per_block=3)
    side = ab_plan.Side("base", "HEAD", "a" * 40, tmp_path, Path("/venv/bin/python"))
    cmd, _ = ab_mod._command(side, plan, 4)
    assert cmd == ["/venv/bin/python", "-m", "suite.cli", "run", "cv/digits_cnn", "--mode", "throughput", "--backend",
                   "torch", "--seed", "12", "--seeds", "3", "--results", str((tmp_path / "ab" / "base").resolve()),
                   "--quiet", "--no-isolate", "--threads", "2", "--nproc", "2", "--set", "throughput.measure_steps=30"]
