"""The untimed init's limit: the watchdog and the recorded MLPerf rule agree for the full tier.

A full-tier spec without `budget.max_init_s` gets MLPerf's init limit of the division the run declares (30 min
closed, 240 min open) as its watchdog window; other specs keep the 600 s hang guard; an explicit value wins.
The spec hash did not move: an unset limit hashes as the 600 s it replaced.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from pydantic import Field
from torch import nn

from suite import harness
from suite import spec as spec_module
from suite.execution.watchdog import Limits, Watchdog
from suite.models.vision import cnn
from suite.spec import schema as spec_schema
from suite.specload import load_spec

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "workloads" / "cv" / "digits_cnn.yaml"


class SlowInitConfig(cnn.Config):
    init_sleep_s: float = Field(default=0.0, ge=0, description="sleep while the model is built (inside init)")


def _build(cfg: SlowInitConfig, meta: dict[str, Any]) -> nn.Module:
    time.sleep(cfg.init_sleep_s)
    return cnn.build(cnn.Config.model_validate(cfg.model_dump(exclude={"init_sleep_s"})), meta)


def _flops(cfg: SlowInitConfig, meta: dict[str, Any]) -> float:
    return cnn.flops_per_sample(cnn.Config.model_validate(cfg.model_dump(exclude={"init_sleep_s"})), meta)


class _SlowInit:
    Config = SlowInitConfig
    build = staticmethod(_build)
    flops_per_sample = staticmethod(_flops)


SLOW_INIT = _SlowInit()


def write_spec(folder: Path, name: str, tiers: list[str], init_sleep_s: float = 0.0, **budget: Any) -> Path:
    data = yaml.safe_load(DIGITS.read_text())
    data["model"] = {"arch": "test_init_limit:SLOW_INIT", "channels": [4], "hidden": 16, "init_sleep_s": init_sleep_s}
    data["budget"] = {"max_train_s": 60, "max_steps": 2, **budget}
    data["eval"] = {"every_steps": 2}
    data["tiers"], data["variants"] = tiers, {}
    data["name"] = "cv/test_digits_copy"  # a copy has a name of its own, never a built-in workload's
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _dog(spec_path: Path, division: str) -> Watchdog:
    run = harness.Run(harness.RunRequest(spec=load_spec(spec_path), results_dir=None, mlperf_division=division))
    dog = Watchdog(run, on_fire=lambda r: None, hard_exit=False)
    dog._started = 100.0  # a synthetic clock: check(now) is all the watchdog's thread does
    return dog


def test_full_tier_init_window_is_mlperfs_limit_of_the_declared_division(tmp_path):
    full = write_spec(tmp_path, "full", ["full"])
    closed = _dog(full, "closed")
    assert closed.check(100 + 601) is None  # past the old 600 s default: no longer killed
    assert closed.check(100 + 1799) is None
    reason = closed.check(100 + 1801)
    assert reason is not None and "init still running after 1801.0 s" in reason
    assert "MLPerf's init limit for the closed division" in reason
    opened = _dog(full, "open")
    assert opened.check(100 + 1801) is None and opened.check(100 + 14399) is None
    assert "open division" in (opened.check(100 + 14401) or "")


def test_other_tiers_keep_the_hang_guard_and_an_explicit_limit_wins(tmp_path):
    smoke = _dog(write_spec(tmp_path, "smoke", ["smoke"]), "open")
    assert smoke.check(100 + 599) is None
    assert "default 600 s" in (smoke.check(100 + 601) or "")
    explicit = load_spec(write_spec(tmp_path, "explicit", ["full"], max_init_s=900))
    assert explicit.init_limit("open") == (900, "budget.max_init_s=900")
    assert Limits.for_run(explicit, "closed").init_s == 900
    lim = Limits.for_run(load_spec(write_spec(tmp_path, "f", ["full"])), "closed")
    assert (lim.init_s, lim.stall_s) == (1800, 60)  # the stall and run windows still come from the budget


def test_the_derived_default_moved_no_spec_hash(tmp_path):
    unset = load_spec(write_spec(tmp_path, "unset", ["full"]))
    stored = load_spec(write_spec(tmp_path, "stored", ["full"], max_init_s=600.0))  # what every spec stored before
    assert unset.budget.max_init_s is None
    assert unset.spec_hash() == stored.spec_hash()
    assert load_spec(write_spec(tmp_path, "other", ["full"], max_init_s=900)).spec_hash() != unset.spec_hash()
    assert unset.canonical()["budget"]["max_init_s"] is None  # the result's copy of the spec says it was derived


def _run_with_watchdog(spec_path: Path, division: str) -> tuple[Watchdog, Any]:
    run = harness.Run(harness.RunRequest(spec=load_spec(spec_path), results_dir=None, threads=1,
                                         mlperf_division=division, measure_peak=False))
    fired: list[Any] = []
    dog = Watchdog(run, on_fire=fired.append, hard_exit=False, poll_s=0.01).start()
    result = run.execute()
    dog.disarm()
    return dog, (fired[0] if fired else result)


def test_a_real_init_is_killed_past_the_scaled_mlperf_limit_and_not_before(tmp_path, monkeypatch):
    """The same limits scaled down 1000x (a real watchdog thread, a real init that sleeps): an init over the
    600 s-equivalent hang guard survives as a full-tier run within MLPerf's limit, and is killed past that."""
    monkeypatch.setattr(spec_schema, "DEFAULT_MAX_INIT_S", 0.6)  # read where Budget.init_limit reads it
    monkeypatch.setitem(spec_module.MLPERF_INIT_LIMIT_S, "closed", 1.8)
    monkeypatch.setitem(spec_module.MLPERF_INIT_LIMIT_S, "open", 120.0)  # far above any init here, loaded or not
    slow = 1.0  # over the scaled 600 s, under the scaled open limit

    dog, result = _run_with_watchdog(write_spec(tmp_path, "within", ["full"], init_sleep_s=slow), "open")
    assert dog.fired_reason is None, dog.fired_reason
    assert result.status in ("reached", "budget") and result.steps > 0
    assert result.clock["init_s"] > 0.6 and result.clock["init_window_s"] == 120.0
    assert "open division" in result.clock["init_window_source"]

    dog, result = _run_with_watchdog(write_spec(tmp_path, "smoke", ["smoke"], init_sleep_s=slow), "open")
    assert dog.fired_reason is not None and "default 0.6 s" in dog.fired_reason  # the small tiers' hang guard
    assert result.status == "error" and result.steps == 0

    dog, result = _run_with_watchdog(write_spec(tmp_path, "past", ["full"], init_sleep_s=3.0), "closed")
    assert dog.fired_reason is not None and "MLPerf's init limit for the closed division" in dog.fired_reason
    assert result.status == "error" and "init still running" in (result.error or "")


@pytest.mark.parametrize("division,limit", [("closed", 1800.0), ("open", 14400.0)])
def test_the_recorded_rule_and_the_window_agree(tmp_path, division, limit):
    spec = load_spec(write_spec(tmp_path, "full", ["full"]))
    from suite.measure import mllog

    clock = mllog.clock_record(12.0, 1.0, division, spec.init_limit(division))
    assert clock["init_limit_s"] == clock["init_window_s"] == limit
