"""Sharded embedding tables as a layout of `trainbench run` (`parallel.tables`, suite/backends/parallel/tables.py):
rec/movielens_dcnv2's tiny variant on 2 gloo ranks, tables split table-, row- and column-wise (and by the `auto`
planner) beside data-parallel dense layers, against one process over 20 steps within tests/support/noise.py's bound
(the one-process run and K = 4 reorderings of each batch), with dlrmv4's optimizer pair (dense Adam, row-wise Adagrad
whose column-wise accumulators are summed over the ranks) and gradient clipping on, so the clip's norm over the
shards is checked too. Another seed's curve lies far outside the bound (the bound can fail); the sharding bugs the
bound must catch are tests/models/test_rec_sharding.py's negative control. Plans that cannot be placed are refused
before the start, exit 2, naming the spec field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.backend_util import ROOT, env, trainbench
from support.curves import loss_curve
from support.noise import SAME_MATH, measure

from suite import registry
from suite.backends.parallel import tables
from suite.backends.torch.backend import supports
from suite.models.recsys.tables import TableSpec
from suite.specload import load_spec

STEPS = 20
SPEC = registry.find_workload("rec/movielens_dcnv2")
# dlrmv4's optimizer pair; a clip that binds (the tiny model's gradient norm is ~0.1-0.5 in these steps)
SETS = {"optimizer.name": "suite.algorithms.dense_sparse:AdamRowWiseAdagrad", "optimizer.lr": 0.05}
OPTIONS = {"grad_clip": 0.05}
MIXED = {"item": "row_wise", "user": "column_wise", "genres": "table_wise:1", "zip3": "row_wise"}


@pytest.fixture(scope="module")
def reference():
    torch.set_num_threads(1)
    return measure(SPEC, STEPS, metric="loss", variant="tiny", overrides=SETS, options=OPTIONS)


def _sharded(tmp_path: Path) -> list[dict]:
    out = tmp_path / "sharded.json"
    runs = [json.dumps({"backend": "torch", "options": OPTIONS, "overrides": {**SETS, "parallel.tables": plan},
                        "variant": "tiny"}) for plan in (MIXED, "auto")]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
           "support.curves", str(out), str(SPEC), str(STEPS), *runs]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.slow  # five one-process curves and one 2-rank launch: ~80 s under load
@pytest.mark.timeout(960)  # above the 900 s guard of its 2-rank child (_sharded)
def test_two_ranks_with_sharded_tables_match_one_process(tmp_path: Path, reference) -> None:
    want, want_evals, noise = reference
    rows = _sharded(tmp_path)
    for row, plan in zip(rows, (MIXED, "auto"), strict=True):
        recorded = row["layout"]["tables"]
        assert recorded["requested"] == plan and recorded["plan"]["item"] == "row_wise", recorded
        gap = max(abs(a - b) for a, b in zip(row["losses"], want, strict=True))
        assert gap <= noise.tol(SAME_MATH), f"{plan}: curve gap {gap:.2e} ({noise})"
        for metric in ("loss", "auc"):
            got, ref = row["evals"][str(STEPS)][metric], want_evals[STEPS][metric]
            assert abs(got - ref) <= max(noise.eval_tol(STEPS), noise.tol()) * (1 if metric == "loss" else 10), \
                f"{plan}: {metric} {got} vs one process {ref} ({noise})"
    assert rows[0]["layout"]["tables"]["plan"]["user"] == "column_wise"
    # the bound can fail: another seed's run, the same arithmetic otherwise, lies far outside it
    other = loss_curve(SPEC, "torch", STEPS, options=OPTIONS, variant="tiny", overrides=SETS, seed=1)
    assert max(abs(a - b) for a, b in zip(other, want, strict=True)) > 100 * noise.tol(SAME_MATH)


@pytest.mark.slow  # a 2-rank launch through the CLI
def test_the_cli_refuses_an_unknown_table_before_the_start(tmp_path: Path) -> None:
    p = trainbench("run", "rec/movielens_dcnv2", "--variant", "tiny", "--nproc", "2", "--set",
                   "parallel.tables={nope: row_wise}", "--results", str(tmp_path), timeout=600)
    text = " ".join((p.stdout + p.stderr).split())
    assert p.returncode == 2, text
    assert "parallel.tables.nope: the model has no table 'nope'" in text and "step" not in text
    assert not list(tmp_path.rglob("*.json"))


def test_plans_the_tables_cannot_take_are_refused_naming_the_field() -> None:
    specs = [TableSpec("item", 1_000_000, 64), TableSpec("user", 1000, 64), TableSpec("rating", 8, 64)]
    spec = load_spec(SPEC, {"parallel.tables": "auto"}, "tiny")
    assert tables.auto_plan(specs, 2) == {"item": "row_wise", "user": "table_wise:0", "rating": "table_wise:1"}
    assert tables.resolve(spec, specs, 2)["item"] == "row_wise"
    # 244 MiB of item table on one rank against 0.1 GiB: the field that bounds it is named
    small = load_spec(SPEC, {"parallel.tables": {"item": "table_wise:0"}, "parallel.table_memory_gib": 0.1}, "tiny")
    with pytest.raises(tables.PlanRefused, match=r"parallel.table_memory_gib: table 'item' is larger than the "):
        tables.resolve(small, specs, 2)
    assert tables.resolve(load_spec(SPEC, {"parallel.tables": "row_wise", "parallel.table_memory_gib": 0.2},
                                    "tiny"), specs, 2)["item"] == "row_wise"  # 122 MiB a rank fits
    odd = load_spec(SPEC, {"parallel.tables": {"user": "column_wise"}}, "tiny")
    with pytest.raises(tables.PlanRefused, match="parallel.tables: table 'user': dim 64 is not divisible by 3"):
        tables.resolve(odd, specs, 3)


@pytest.mark.parametrize(("sets", "message"), [
    ({"parallel.tables": "diagonal"}, "parallel.tables: unknown placement 'diagonal'"),
    ({"parallel.tables": {"item": "table_wise:x"}}, "parallel.tables.item: unknown placement 'table_wise:x'"),
    ({"parallel.tables": "auto", "parallel.fsdp": 2}, "parallel.tables with fsdp=2 is not implemented"),
    ({"parallel.table_memory_gib": 1.0}, "parallel.table_memory_gib: bounds the sharded embedding tables"),
])
def test_spec_only_refusals_name_the_field(sets, message) -> None:
    assert message in (supports(load_spec(SPEC, sets, "tiny")) or "")


def test_other_backends_and_models_refuse_sharded_tables() -> None:
    from suite.backends.matrix import unsupported_reason

    assert "--backend torch only" in unsupported_reason("deepspeed", load_spec(SPEC, {"parallel.tables": "auto"}))
    gpt = ROOT / "tests" / "support" / "specs" / "char_gpt.yaml"
    assert "model.arch hstu or dcnv2" in supports(load_spec(gpt, {"parallel.tables": "auto"}))
