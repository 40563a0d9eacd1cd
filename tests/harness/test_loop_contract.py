"""The loop's contract (suite/loop/, issue 43): every driver of a run's steps writes through the typed `Sink`, the
harness's Run is one, and time to target is set in one place (Figures.reach_target), for the harness's own loop and a
trainer of its own (veRL) alike."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from suite import harness, throughput
from suite.backends.verl import launch as verl_launch
from suite.loop.contract import Sink
from suite.specload import load_spec

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "workloads" / "cv" / "digits_cnn.yaml"


def _members(protocol: type) -> set[str]:
    names = set(protocol.__annotations__)
    names |= {n for n, v in vars(protocol).items() if (callable(v) or isinstance(v, property)) and not n.startswith("_")}
    return names


def test_the_harness_run_is_a_sink(tmp_path) -> None:
    members = _members(Sink)
    assert {"spec", "steps", "curve", "record_eval", "reach_target", "start_clock", "stop_clock", "count_step",
            "end", "flag"} <= members, members
    the_run = harness.Run(harness.RunRequest(spec=load_spec(DIGITS), results_dir=None, threads=1, measure_peak=False))
    missing = sorted(n for n in members if not hasattr(the_run, n))
    assert missing == [], f"harness.Run lacks what the Sink protocol declares: {missing}"
    assert (the_run.seed, the_run.mode, the_run.extra_config) == (0, "tta", the_run.req.extra_config)


def test_the_drivers_take_the_sink_not_any() -> None:
    for fn in (throughput.measure, throughput.compact_steps, verl_launch.Follow.drive, verl_launch.Follow._record):
        first = next(p for p in inspect.signature(fn).parameters.values() if p.name != "self")
        assert first.annotation in ("Sink", Sink), f"{fn.__qualname__}({first.name}: {first.annotation})"


def test_time_to_target_is_set_in_one_place() -> None:
    """No module of suite/ but suite/loop/figures.py assigns a run's time_to_target_s / steps_to_target (results
    and the MLPerf importer build Result objects from recorded figures; they set no run's clock)."""
    setters = []
    for path in sorted((ROOT / "suite").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AugAssign | ast.AnnAssign) else []
            for t in targets:
                for el in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    if isinstance(el, ast.Attribute) and el.attr in ("time_to_target_s", "steps_to_target"):
                        setters.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert setters and all(s.startswith("suite/loop/figures.py:") for s in setters), setters


def test_reach_target_records_the_clock_and_the_counts(tmp_path) -> None:
    the_run = harness.Run(harness.RunRequest(spec=load_spec(DIGITS), results_dir=None, threads=1, measure_peak=False))
    the_run.count_step()
    the_run.count_step()
    the_run.reach_target(1.5)
    batch = the_run.spec.data.batch_size
    assert (the_run.time_to_target_s, the_run.steps_to_target, the_run.samples_to_target) == (1.5, 2, 2 * batch)
    the_run.count_step(10)  # a trainer that counts its own steps (veRL): the steps so far
    assert (the_run.steps, the_run.samples) == (10, 10 * batch)
    the_run.reach_target(0.25, at_start=True)
    assert (the_run.time_to_target_s, the_run.steps_to_target, the_run.samples_to_target) == (0.25, 0, 0)
