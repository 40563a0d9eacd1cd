"""`trainbench data prepare NAME --synthetic`: every MLPerf recipe's tiny variant runs from the CLI on a machine with
no data (an empty $TRAINBENCH_DATA, as on a fresh clone), its results say synthetic; real data is never written over;
the generator is the product's (suite/data/synthetic/files.py) and imports none of the readers it stands in for."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.data.locate import link_local
from suite.data.synthetic import files as synthetic
from suite.registry import workload_files
from suite.specload import load_spec

ROOT = Path(__file__).resolve().parents[2]
# the MLPerf Training recipes (mlperf_benchmark in their specs) and the data set each one's tiny variant reads
MLPERF_DATA = {"nlp/llama31_8b": "megatron_indexed", "nlp/gpt_oss_20b": "megatron_indexed",
               "nlp/deepseekv3_671b": "megatron_indexed", "nlp/llama2_70b_lora": "govreport",
               "cv/flux1": "flux_latents", "rl/gsm8k_grpo": "gsm8k", "rec/dlrmv4": "yambda"}
# rl/qwen35_397b_grpo's tasks run in per-task container images that no generator stands in for; its tiny variant reads
# generated repositories (suite/data/rl/bugfix_repos.py), so no `data prepare` comes before it
NO_FILES = {"gym", "r2e_gym"}


def _env(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINBENCH_")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", TRAINBENCH_DATA=str(data), COLUMNS="200")
    return env


def _cli(args: list[str], data: Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=_env(data), timeout=timeout)


def test_every_full_recipe_data_set_has_a_generator_and_every_mlperf_recipe_is_covered():
    specs = {name: load_spec(path) for name, path in workload_files().items()}
    full = {name: s for name, s in specs.items() if "full" in s.tiers}
    mlperf = {name for name, s in full.items() if getattr(s, "mlperf_benchmark", None)}
    assert set(MLPERF_DATA) >= mlperf - {"rl/halfcheetah_ppo", "rl/qwen35_397b_grpo"}, mlperf - set(MLPERF_DATA)
    for name, s in full.items():
        if s.data.name in NO_FILES:  # simulated (MuJoCo), or container images: no files to stand in for
            continue
        assert s.data.name in synthetic.SYNTHETIC, f"{name} reads {s.data.name}, which has no synthetic generator"
        assert name in synthetic.SYNTHETIC[s.data.name].recipes


def test_the_generator_imports_no_reader_and_no_test_helper():
    imported: set[str] = set()
    for writers in ("files.py", "flux_files.py"):  # the generator and its flux1 writers
        tree = ast.parse((ROOT / "suite/data/synthetic" / writers).read_text())
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        imported |= {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                     for a in n.names}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    readers = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "suite/data").rglob("*.py")
               if p.stem != "__init__" and "synthetic" not in p.parts and not p.stem.endswith("_fixture")}
    readers -= {"suite.data.base", "suite.data.locate"}  # the error type and the folder rules, not readers
    assert "suite.data.text.streams" in readers and "suite.data.rec.yambda" in readers, readers
    assert not imported & readers, imported & readers
    bench = (ROOT / "benchmarks/device_check.py").read_text()
    assert "support.datafiles" not in bench and "suite.data.synthetic" in bench


def test_real_data_is_never_overwritten_and_a_real_copy_replaces_a_synthetic_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINBENCH_DATA", str(tmp_path / "data"))
    real = tmp_path / "data" / "govreport"
    real.mkdir(parents=True)
    (real / "train-00000-of-00001.parquet").write_bytes(b"real")
    r = _cli(["data", "prepare", "govreport", "--synthetic"], tmp_path / "data", tmp_path)
    assert r.returncode == 2 and "not synthetic" in r.stderr and str(real) in r.stderr, r.stderr
    assert (real / "train-00000-of-00001.parquet").read_bytes() == b"real"
    r = _cli(["data", "prepare", "nosuch", "--synthetic"], tmp_path / "data", tmp_path)
    assert r.returncode == 2 and "unknown data set 'nosuch'" in r.stderr, r.stderr
    r = _cli(["data", "prepare", "digits", "--synthetic"], tmp_path / "data", tmp_path)
    assert r.returncode == 2 and "no synthetic generator" in r.stderr, r.stderr
    r = _cli(["data", "prepare", "govreport", "--synthetic", "--from", str(real)], tmp_path / "data", tmp_path)
    assert r.returncode == 2 and "--synthetic and --from" in r.stderr, r.stderr
    # a linked real copy is not written through either
    folder, _ = synthetic.prepare("megatron_indexed", tmp_path / "data")
    assert (folder / synthetic.MARKER).is_file()
    copy = tmp_path / "elsewhere"
    copy.mkdir()
    link_local("megatron_indexed", copy)  # the real copy takes the synthetic folder's place
    assert (tmp_path / "data" / "megatron_indexed").is_symlink()
    with pytest.raises(FileExistsError, match="links to a local copy"):
        synthetic.prepare("megatron_indexed", tmp_path / "data")
    assert list(copy.iterdir()) == []


def test_a_run_is_synthetic_exactly_when_it_reads_under_the_marker(tmp_path, monkeypatch):
    root = tmp_path / "data"
    monkeypatch.setenv("TRAINBENCH_DATA", str(root))
    spec = load_spec(workload_files()["nlp/llama31_8b"], variant="tiny")
    assert synthetic.sources(spec, root) == []
    folder, _ = synthetic.prepare("megatron_indexed", root)
    assert synthetic.sources(spec, root) == [str(folder.resolve())]
    plain = tmp_path / "copy"  # the same bytes without the marker: not synthetic (the marker decides, not the bytes)
    plain.mkdir()
    for f in folder.iterdir():
        if f.name != synthetic.MARKER:
            (plain / f.name).write_bytes(f.read_bytes())
    other = load_spec(workload_files()["nlp/llama31_8b"], overrides={"data.path": str(plain)}, variant="tiny")
    assert synthetic.sources(other, root) == []
    gsm = load_spec(workload_files()["rl/gsm8k_grpo"], variant="tiny")  # relative to $TRAINBENCH_DATA
    (root / "gsm8k-tiny" / "model").mkdir(parents=True)
    assert synthetic.sources(gsm, root) == []
    synthetic.write_marker(root / "gsm8k-tiny", "gsm8k")
    assert synthetic.sources(gsm, root) == [str((root / "gsm8k-tiny").resolve())]


@pytest.mark.slow
def test_every_mlperf_recipe_tiny_variant_runs_from_the_cli_after_prepare_synthetic(tmp_path):
    """The user's road on a machine with no data: each data set prepared with --synthetic, then one
    `trainbench run ... --variant tiny` of every MLPerf recipe; every result written and marked synthetic."""
    data = tmp_path / "data"
    for name in sorted(set(MLPERF_DATA.values())):
        r = _cli(["data", "prepare", name, "--synthetic"], data, tmp_path)
        assert r.returncode == 0, r.stderr
        assert "SYNTHETIC files written" in r.stdout
    listed = _cli(["data", "list", "--json"], data, tmp_path)
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert all(rows[n]["present"] and "SYNTHETIC" in rows[n]["where"] for n in set(MLPERF_DATA.values()))
    r = _cli(["run", *MLPERF_DATA, "--variant", "tiny", "--results", str(tmp_path / "results"), "--json"], data, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = json.loads(r.stdout)
    assert sorted(run["workload"] for run in runs) == sorted(MLPERF_DATA)
    assert all(run["status"] in ("budget", "reached") and run["synthetic_data"] is True for run in runs), runs
    written = [json.loads(p.read_text()) for p in (tmp_path / "results").rglob("*.json") if ".index" not in p.parts]
    written = [w for w in written if "run_id" in w]
    assert len(written) == len(MLPERF_DATA)
    assert all(w["synthetic_data"] and any("SYNTHETIC data" in x for x in w["warnings"]) for w in written)
    # and the road on: each MLPerf recipe's log through the official checker, its own benchmark's rules (the tiny
    # model on synthetic rows cannot reach the target, so the verdict is a rejection naming eval_accuracy)
    result = next(p for p in (tmp_path / "results").rglob("*.json") if "llama31_8b" in str(p))
    checked = _cli(["mllog", "check", str(result), "--json"], data, tmp_path)
    verdict = json.loads(checked.stdout)
    assert checked.returncode == 1 and verdict["mlperf_benchmark"] == "llama31_8b", checked.stdout + checked.stderr
    assert verdict["messages"] and all("eval_accuracy" in m for m in verdict["messages"]), verdict["messages"]
