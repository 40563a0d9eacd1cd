"""One builder of a run's figures (issue 43): stats.figures_of makes every RunFigures that compare and promote
read, whether the run comes from a validated Result, the lean reader (runfiles.read_file) or the results index,
so a new per-seed figure is added in RunFigures and figures_of only."""

from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path

from benchmarks.sim.results import T0, site_result
from suite.results import index, runfiles
from suite.results.record import EvalPoint, write_result
from suite.results.stats import RunFigures, figures_of

SUITE = Path(__file__).resolve().parents[2] / "suite"


def _results(root: Path) -> list:
    rs = [site_result(seed=0),
          site_result(seed=1, status="budget", started_at=T0 + timedelta(minutes=1), mfu=None),
          site_result(seed=2, started_at=T0 + timedelta(minutes=2), phases={"rollout_s_per_step": 1.5,
                      "training_s_per_step": 0.25}, warnings=["paused 3.0 s inside the timed run"],
                      eval_curve=[EvalPoint(step=1, samples=1, elapsed_s=1.0, train_s=1.0, metrics={"accuracy": 0.99})])]
    for r in rs:
        write_result(root, r)
    return rs


def test_the_index_and_the_lean_reader_give_what_figures_of_gives(tmp_path: Path) -> None:
    root = tmp_path / "results"
    by_id = {r.run_id: figures_of(r) for r in _results(root)}
    recs, bad = index.records(root)
    assert not bad and len(recs) == 3
    for rec in recs:
        assert rec.figures.model_dump() == by_id[rec.figures.run_id].model_dump()
    for path in sorted(root.rglob("*.json")):
        rec = runfiles.read_file(path)
        assert rec.figures.model_dump() == by_id[rec.figures.run_id].model_dump()
    assert sum(f.rollout_s_per_step is not None for f in by_id.values()) == 1  # the fixture reaches the RL fields


def test_figures_of_is_the_only_place_that_builds_run_figures() -> None:
    builders = []
    for path in sorted(SUITE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            call = node.func if isinstance(node, ast.Call) else None
            name = ast.unparse(call) if call is not None else ""
            if name.endswith(("RunFigures", "RunFigures.model_construct", "RunFigures.model_validate")):
                builders.append(f"{path.relative_to(SUITE.parent)}:{node.lineno}")
    assert len(builders) == 2 and all(b.startswith("suite/results/stats.py:") for b in builders), builders
    assert set(RunFigures.model_fields) >= {"run_id", "goodput", "rollout_s_per_step"}
