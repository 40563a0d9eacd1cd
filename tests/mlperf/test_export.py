"""`trainbench results export-mlperf`: a submission-shaped folder from local runs of an MLPerf-named workload, judged
by mlperf_logging's own package_checker (ruleset 6.1.0). A tiny variant's export is written and fails, naming the
keys whose rules it breaks; the system description's fields only a person knows are named when missing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.datafiles import write_c4_indexed
from support.faults import cli
from support.faults import env as subprocess_env

from suite import registry
from suite.harness import RunRequest, run
from suite.specload import load_spec

PERSON = {"submitter": "Example Org", "division": "closed", "status": "Research, Development, or Internal (RDI)"}


@pytest.mark.slow  # a tiny llama31_8b run, the export and mlperf_logging's package checker: ~30-90 s on busy cores
def test_a_tiny_variants_export_fails_naming_the_keys(tmp_path):
    data = write_c4_indexed(tmp_path / "c4", vocab=512)
    spec = load_spec(registry.workload_files()["nlp/llama31_8b"], {"data.path": str(data)}, variant="tiny")
    result, _ = run(RunRequest(spec=spec, threads=1, results_dir=tmp_path / "results", measure_peak=False,
                               mlperf_org="Example Org", mlperf_division="closed"))
    assert result.mllog
    fields = tmp_path / "fields.json"
    fields.write_text(json.dumps({"submitter": "Example Org", "division": "closed"}))
    args = ["results", "export-mlperf", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "pkg"),
            "--system-fields", str(fields)]
    p = subprocess.run(cli(*args), capture_output=True, text=True, env=subprocess_env(), timeout=600)
    assert p.returncode == 2 and "missing status" in p.stderr and str(fields) in p.stderr, p.stderr
    assert not (tmp_path / "pkg").exists()

    fields.write_text(json.dumps(PERSON))
    p = subprocess.run(cli(*args), capture_output=True, text=True, env=subprocess_env(), timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    log = tmp_path / "pkg" / "example-org" / "results" / result.hardware.slug / "llama31_8b" / "result_0.txt"
    assert log.is_file()
    named = next(line for line in p.stderr.splitlines() if str(log) in line)
    for key in ("max_sequence_length", "eval_samples", "max_steps"):  # what the tiny variant changes
        assert key in named, named
    desc = json.loads((tmp_path / "pkg" / "example-org" / "systems" / f"{result.hardware.slug}.json").read_text())
    assert desc["submitter"] == "Example Org" and desc["host_processor_model_name"] == result.hardware.cpu_model
    # the outside reference: mlperf_logging's package checker refuses the package (one run of ten, rules broken)
    out = tmp_path / "checker.log"
    subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(tmp_path / "pkg" / "example-org"),
                    "training", "6.1.0", "--log_output", str(out)], capture_output=True, text=True, timeout=600)
    text = out.read_text()
    assert "max_sequence_length" in text and "ERROR" in text, text[-3000:]
