"""Baselines: promote from real result files, what a baseline holds, refusals, and the lean reader's fidelity."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from benchmarks.sim.results import noisy_runs, simulated_result, write_all
from suite.compare import output as compare_output
from suite.compare import tta as cmp
from suite.results import baseline_schema, runfiles, stats
from suite.results import baselines as bl
from suite.results.record import ResultError, parse_result, result_files


def promote(root: Path, to: Path, **kw) -> list[Path]:
    loaded = bl.load_paths([root], validate=True)
    assert not loaded.errors
    return [bl.write_baseline(to, b) for b in bl.build_baselines(loaded.records, **kw)]


def test_promote_writes_aggregate_raw_figures_and_provenance(tmp_path: Path) -> None:
    rng = random.Random(1)
    runs = noisy_runs(rng, 5, noise_floor=0.08)
    runs[4].status, runs[4].time_to_target_s, runs[4].steps_to_target = "budget", None, None
    write_all(tmp_path / "res", runs)
    (path,) = promote(tmp_path / "res", tmp_path / "baselines", promoted_by_git_sha="feedbeef")
    assert path == tmp_path / "baselines" / "cpu-test-2c" / "cv" / "digits_cnn" / "torch.json"
    data = json.loads(path.read_text())
    assert data["schema_version"] == baseline_schema.BASELINE_SCHEMA_VERSION and data["kind"] == "trainbench-baseline"
    assert (data["hardware"], data["workload"], data["backend"], data["spec_hash"]) == (
        "cpu-test-2c", "cv/digits_cnn", "torch", "spec0001")
    assert data["noise_floor"] == 0.08
    agg = data["aggregate"]
    assert (agg["runs"], agg["reached"], agg["success_rate"]) == (5, 4, 0.8)
    ttas = sorted(r.time_to_target_s for r in runs[:4])
    assert agg["tta_olympic_s"] == pytest.approx(sum(ttas[1:]) / 3)  # the failed run is dropped as the slowest
    assert agg["tta_max_s"] is None  # infinite: stored as null, the run's status says why
    assert [r["seed"] for r in data["runs"]] == [0, 1, 2, 3, 4]
    assert data["runs"][4]["status"] == "budget" and data["runs"][4]["time_to_target_s"] is None
    assert {"time_to_target_s", "steps_to_target", "time_per_step_s", "samples_per_s", "mfu",
            "peak_memory_bytes", "energy_j"} <= set(data["runs"][0])
    prov = data["provenance"]
    assert sorted(prov["run_ids"]) == sorted(r.run_id for r in runs)
    assert len(prov["result_files"]) == 5 and prov["result_git_shas"] == ["0123abcd"]
    assert prov["promoted_by_git_sha"] == "feedbeef" and prov["promoted_at"]


def test_compare_against_a_baseline_equals_compare_against_its_results(tmp_path: Path) -> None:
    rng = random.Random(2)
    write_all(tmp_path / "res", noisy_runs(rng, 5))
    write_all(tmp_path / "cand", noisy_runs(rng, 5, time_per_step_s=0.012, cv_steps=0.01))
    promote(tmp_path / "res", tmp_path / "baselines")
    via_baseline = compare_output.to_json(cmp.compare([tmp_path / "baselines"], [tmp_path / "cand"]))
    via_results = compare_output.to_json(cmp.compare([tmp_path / "res"], [tmp_path / "cand"]))
    via_baseline["summary"].pop("baseline_files"), via_results["summary"].pop("baseline_files")
    assert via_baseline == via_results
    assert via_baseline["pairs"][0]["verdict"] == "regressed"


def test_refuses_mixed_spec_hashes(tmp_path: Path) -> None:
    rng = random.Random(3)
    write_all(tmp_path / "res", noisy_runs(rng, 3) + noisy_runs(rng, 3, spec_hash="newspec9", first_seed=10))
    with pytest.raises(bl.PromoteError) as e:
        promote(tmp_path / "res", tmp_path / "baselines")
    msg = str(e.value)
    assert "cv/digits_cnn on torch: mixed spec hashes" in msg and "spec0001: 3 run(s)" in msg
    assert "newspec9: 3 run(s)" in msg and "--spec-hash" in msg
    assert not (tmp_path / "baselines").exists()  # nothing half-promoted


def test_refuses_mixed_hardware(tmp_path: Path) -> None:
    rng = random.Random(4)
    write_all(tmp_path / "res", noisy_runs(rng, 3) + noisy_runs(rng, 3, hardware="nvidia-h200-x8", first_seed=10))
    with pytest.raises(bl.PromoteError, match=r"mixed hardware \(cpu-test-2c: 3 run\(s\).*nvidia-h200-x8: 3"):
        promote(tmp_path / "res", tmp_path / "baselines")


def test_refuses_too_few_seeds_duplicates_and_silent_replacement(tmp_path: Path) -> None:
    rng = random.Random(5)
    write_all(tmp_path / "three", noisy_runs(rng, 3))
    with pytest.raises(bl.PromoteError, match="3 run.*at least 4 seeds"):  # 3 + 3 seeds can never reach p 0.05
        promote(tmp_path / "three", tmp_path / "baselines")
    write_all(tmp_path / "dup", noisy_runs(rng, 3) + noisy_runs(rng, 3))
    with pytest.raises(bl.PromoteError, match=r"seed\(s\) \[0, 1, 2\] appear twice"):
        promote(tmp_path / "dup", tmp_path / "baselines")
    write_all(tmp_path / "ok", noisy_runs(rng, 4))
    promote(tmp_path / "ok", tmp_path / "baselines")
    with pytest.raises(bl.PromoteError, match="--replace"):
        promote(tmp_path / "ok", tmp_path / "baselines")


def test_lean_reader_agrees_with_the_full_schema(tmp_path: Path) -> None:
    rng = random.Random(6)
    runs = noisy_runs(rng, 6, fail_p=0.3)
    runs.append(simulated_result(50, steps_to_target=None, time_per_step_s=0.02, status="error", mfu=None))
    write_all(tmp_path / "res", runs)
    for path in result_files(tmp_path / "res"):
        lean = runfiles.read_file(path)
        full = runfiles.read_file(path, validate=True)
        assert isinstance(lean, runfiles.RunRecord) and isinstance(full, runfiles.RunRecord)
        assert lean.figures.model_dump() == full.figures.model_dump()
        assert (lean.key, lean.spec_hash, lean.workload_version, lean.noise_floor) == (
            full.key, full.spec_hash, full.workload_version, full.noise_floor)
        assert full.figures == stats.figures_of(parse_result(path.read_text(), str(path)))


# a file the lean decoder refuses goes through the full schema, so the verdict (and the message) is the one
# `results validate` gives: one reader, one verdict (issue 17, item 6)
@pytest.mark.parametrize(("field", "value", "message"), [
    ("status", "finished", r"status: Input should be 'reached', 'budget'"),
    ("hardware", None, r"hardware: Input should be a valid dictionary"),
    ("hardware", {"device_type": "cpu"}, r"hardware.slug: Field required"),
    ("time_to_target_s", "fast", r"time_to_target_s: Input should be a valid number"),
    ("seed", 1.5, r"seed: Input should be a valid integer"),
    ("step_time_s", [], r"step_time_s: Input should be a valid dictionary"),
    ("started_at", "yesterday", r"started_at: Input should be a valid datetime"),
])
def test_lean_reader_names_file_and_field(tmp_path: Path, field: str, value, message: str) -> None:
    data = simulated_result(0, steps_to_target=100, time_per_step_s=0.01).model_dump(mode="json")
    data[field] = value
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultError, match=message) as e:
        runfiles.read_file(path)
    assert str(e.value).startswith(str(path))


def test_corrupt_baseline_file_is_named(tmp_path: Path) -> None:
    rng = random.Random(7)
    write_all(tmp_path / "res", noisy_runs(rng, 4))
    (path,) = promote(tmp_path / "res", tmp_path / "baselines")
    data = json.loads(path.read_text())
    data["runs"][0]["seeed"] = 1
    path.write_text(json.dumps(data))
    loaded = bl.load_paths([tmp_path / "baselines"])
    assert len(loaded.errors) == 1 and str(path) in loaded.errors[0] and "seeed" in loaded.errors[0]
    data["schema_version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(ResultError, match="baseline schema_version 99"):
        runfiles.read_file(path)


def test_a_run_reached_twice_counts_once(tmp_path: Path) -> None:
    rng = random.Random(8)
    write_all(tmp_path / "res", noisy_runs(rng, 5))
    promote(tmp_path / "res", tmp_path / "baselines")
    loaded = bl.load_paths([tmp_path / "res", tmp_path / "baselines", tmp_path / "res"])
    (side,) = runfiles.sides(loaded).values()
    assert len(side.by_spec["spec0001"]) == 5
