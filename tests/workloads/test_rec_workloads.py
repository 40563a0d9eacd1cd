"""The recommender workloads end to end: a tiny run records bytes moved (analytic bytes per sample x steady
samples/s; a share of peak bandwidth only for a device the cited table knows), the temporal split keeps evaluation
strictly in the future, and bad data stops `trainbench run` with exit 2 before anything is recorded, naming the file
and the field."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from suite import harness, registry
from suite.measure.bandwidth import bytes_moved_fields, peak_bandwidth
from suite.specload import load_spec
from suite.workloads.contract import Context

ROOT = Path(__file__).resolve().parents[2]


def _tiny(name: str, overrides: dict | None = None):
    return load_spec(registry.find_workload(name), overrides=overrides, variant="tiny")


def test_a_tiny_run_records_bytes_moved() -> None:
    spec = _tiny("rec/movielens_dcnv2")
    result, _ = harness.run(harness.RunRequest(spec=spec, results_dir=None, threads=1))
    assert result.status in ("budget", "reached"), result.error
    w = registry.task_class(spec.task)(spec, Context(Path("."), 0, torch.device("cpu")))
    t = result.throughput
    assert t["embedding_bytes_per_s"] == pytest.approx(w.bytes_per_sample() * t["steady_samples_per_s"])
    assert "bandwidth_utilization" not in t  # a CPU: no cited peak, no guessed share


def test_bandwidth_share_only_for_cited_devices() -> None:
    class W:
        def bytes_per_sample(self) -> float:
            return 1e6

    assert peak_bandwidth("NVIDIA H100 80GB HBM3")[0] == 3.35e12
    got = bytes_moved_fields(W(), 1e6, 8, "NVIDIA H100 80GB HBM3")
    assert got["bandwidth_utilization"] == pytest.approx(1e12 / 8 / 3.35e12)
    assert "bandwidth_utilization" not in bytes_moved_fields(W(), 1e6, 1, "cpu")
    assert bytes_moved_fields(object(), 1e6, 1, "cpu") == {}


def test_evaluation_is_strictly_later_than_training() -> None:
    spec = _tiny("rec/movielens_hstu")
    w = registry.task_class(spec.task)(spec, Context(Path("."), 0, torch.device("cpu")))
    assert w.data.timestamp[w.train_idx].max() <= w.data.timestamp[w.eval_idx].min()
    first = next(iter(w.train_batches(0, 1)))
    assert int(w.data.window[w.train_idx].max()) == spec.data.params()["n_windows"] - 2
    assert set(first) == {"user", "hist_item", "hist_rating", "hist_time", "query_time", "cand_item", "label"}


def test_the_batches_carry_the_events_times_and_the_loss_is_weighted() -> None:
    """hist_time is each history event's own timestamp (ml-100k.inter), 0 on padding; the query time is the last
    history event's (movie_lens.py), 0 for an empty history; the training loss is 0.2 x the mean BCE
    (causal_multitask_weights)."""
    spec = _tiny("rec/movielens_hstu")
    w = registry.task_class(spec.task)(spec, Context(Path("."), 0, torch.device("cpu")))
    d = w.data
    idx = w.train_idx[:200]
    b = w.features(idx)
    valid = b["hist_item"] > 0
    assert (b["hist_time"][~valid] == 0).all() and (b["hist_time"][valid] > 8e8).all()
    for j in range(0, 200, 37):  # the user's previous interactions' timestamps, in order
        earlier = np.flatnonzero((d.user == d.user[idx[j]]) & (np.arange(len(d)) < idx[j]))[-spec.data.params()[
            "max_history"]:]
        assert b["hist_time"][j][valid[j]].tolist() == d.timestamp[earlier].tolist()
    assert torch.equal(b["query_time"], torch.where(valid[:, -1], b["hist_time"][:, -1], 0))
    assert (~valid[:, -1]).any() and valid[:, -1].any()
    model = w.build_model().eval()
    with torch.no_grad():
        bce = torch.nn.functional.binary_cross_entropy_with_logits(model(b).float(), b["label"])
        assert w.loss(model, b) == pytest.approx(0.2 * float(bce), rel=1e-6)


def _write(folder: Path, header: str, rows: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ml-100k.inter").write_text(header + "\n" + "\n".join(rows) + "\n")
    (folder / "ml-100k.user").write_text("user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token\n"
                                         + "".join(f"{u}\t30\tM\tx\t12345\n" for u in range(1, 6)))
    (folder / "ml-100k.item").write_text("item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n"
                                         + "".join(f"{i}\tm\t1990\tDrama\n" for i in range(1, 9)))
    return folder


def _run(tmp_path: Path, folder: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", TRAINBENCH_DATA=str(tmp_path / "nodata"))
    return subprocess.run([sys.executable, "-m", "suite.cli", "run", "rec/movielens_dcnv2", "--variant", "tiny",
                           "--set", f"data.path={folder}", *extra, "--results", str(tmp_path / "res")],
                          capture_output=True, text=True, env=env, timeout=300)


def test_bad_data_exits_2_before_start_naming_file_and_field(tmp_path: Path) -> None:
    rows = [f"{1 + k % 5}\t{1 + k % 8}\t{1 + k % 5}\t{1000 + k}" for k in range(60)]
    no_label = _write(tmp_path / "nolabel", "user_id:token\titem_id:token\ttimestamp:float",
                      [r.rsplit("\t", 2)[0] + "\t" + r.rsplit("\t", 1)[1] for r in rows])
    r = _run(tmp_path, no_label)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "ml-100k.inter: no column 'rating'" in r.stdout + r.stderr
    assert not list((tmp_path / "res").rglob("*.json")) if (tmp_path / "res").exists() else True


@pytest.mark.slow
def test_an_empty_window_exits_2_before_start(tmp_path: Path) -> None:
    rows = [f"{1 + k % 5}\t{1 + k % 8}\t{1 + k % 5}\t{1000 + k}" for k in range(60)]
    good = _write(tmp_path / "few", "user_id:token\titem_id:token\trating:float\ttimestamp:float", rows)
    r = _run(tmp_path, good, "--set", "data.n_windows=100", "--set", "data.limit=60")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "window" in r.stdout + r.stderr and "is empty" in r.stdout + r.stderr
    assert not list((tmp_path / "res").rglob("*.json")) if (tmp_path / "res").exists() else True


@pytest.mark.slow  # a CLI run
def test_an_id_past_its_table_exits_2_before_start_naming_file_field_and_table(tmp_path: Path) -> None:
    """A rating of 9 in the .inter file is past the HSTU's 7 action ids (its ActionEncoder reads ratings 1-5 as
    bits; no table, so an unchecked 9 would silently read as no action): refused during the untimed init
    (it used to end the run mid-step as an error), naming the file, the field, the table and its largest id."""
    rows = [f"{1 + k % 5}\t{1 + k % 8}\t{9 if k == 7 else 1 + k % 5}\t{1000 + k}" for k in range(60)]
    folder = _write(tmp_path / "rating9", "user_id:token\titem_id:token\trating:float\ttimestamp:float", rows)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", TRAINBENCH_DATA=str(tmp_path / "nodata"))
    r = subprocess.run([sys.executable, "-m", "suite.cli", "run", "rec/movielens_hstu", "--variant", "tiny", "--set",
                        f"data.path={folder}", "--results", str(tmp_path / "res")],
                       capture_output=True, text=True, env=env, timeout=300)
    text = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 2, text
    assert ("ml-100k.inter field 'rating' (history): id 9 is out of range for the actions 'rating' (ids 0..6, "
            "7 rows)") in text, text
    assert "step" not in text
    assert not list((tmp_path / "res").rglob("*.json")) if (tmp_path / "res").exists() else True


def test_every_table_lookup_of_the_workloads_is_checked() -> None:
    """The check covers each table the models build (a table without its ids checked would slip through), and the
    HSTU's actions, which its ActionEncoder reads without a table."""
    for name, extra in (("rec/movielens_hstu", {"rating"}), ("rec/movielens_dcnv2", set())):
        spec = _tiny(name)
        w = registry.task_class(spec.task)(spec, Context(Path("."), 0, torch.device("cpu")))
        model = w.build_model()
        assert {t for t, _, _ in w.id_columns()} == set(model.tables.specs) | extra, name
