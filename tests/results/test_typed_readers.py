"""The typed readers the site uses: compare.read_report, baselines.read_baseline, study_report.read_study.
Each reads back exactly what its owner wrote and refuses anything else with a message naming the file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from support.import_graph import import_graph
from support.site_factory import write_compare_report

from suite.compare import model as compare_model
from suite.compare import output as compare_output
from suite.compare import tta as cmp
from suite.results import baseline_schema
from suite.results.record import ResultError
from suite.studies import profile_plot
from suite.studies import report as study_report
from suite.studies import runner as study


def test_compare_report_reads_back_as_the_report_it_was_written_from(tmp_path: Path) -> None:
    path = write_compare_report(tmp_path)
    report = compare_output.read_report(path)
    assert isinstance(report, compare_model.Report)
    assert json.loads(json.dumps(compare_output.to_json(report))) == json.loads(path.read_text())
    assert [p.verdict for p in report.pairs] == [compare_model.REGRESSED, compare_model.IMPROVED, compare_model.SAME]
    assert report.exit_code == compare_model.EXIT_REGRESSION and report.pairs[0].cause == "throughput"
    assert compare_output.to_markdown(report) == compare_output.to_markdown(cmp.compare([tmp_path / "base"], [tmp_path / "cand"]))


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "cannot read as JSON"),
    ('{"verdict": "regression", "rows": []}', "not a compare report"),
    ('{"kind": "trainbench-compare", "schema_version": 99}', "schema_version 99"),
    ('{"kind": "trainbench-compare", "schema_version": 1, "settings": {}}', "KeyError"),
])
def test_compare_reader_refuses_other_files_naming_them(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(compare_output.ReportError, match=message) as e:
        compare_output.read_report(path)
    assert str(path) in str(e.value)


def test_a_bad_verdict_in_a_report_is_refused(tmp_path: Path) -> None:
    path = write_compare_report(tmp_path)
    data = json.loads(path.read_text())
    data["pairs"][0]["verdict"] = "slower"
    path.write_text(json.dumps(data))
    with pytest.raises(compare_output.ReportError, match="verdict 'slower'"):
        compare_output.read_report(path)


def test_baseline_reader_refuses_what_is_not_a_baseline(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"aggregate": {"tta_olympic_s": 10.0}}))
    with pytest.raises(ResultError, match="not a baseline file"):
        baseline_schema.read_baseline(path)
    path.write_text(json.dumps({"kind": "trainbench-baseline", "schema_version": 1, "hardware": "x"}))
    with pytest.raises(ResultError, match=r"b.json: .*workload"):
        baseline_schema.read_baseline(path)


def _study(tmp: Path) -> Path:
    def rec(w: str, algo: str, seed: int, tta: float | None, status: str = "reached") -> dict:
        return {"workload": w, "algorithm": algo, "seed": seed, "status": status, "time_to_target_s": tta}

    records = [rec("a", "x", s, t) for s, t in enumerate((2.0, 2.2, 2.4))] + \
        [rec("a", "y", s, t) for s, t in enumerate((1.0, 1.1, 1.2))] + \
        [rec("b", "x", s, 1.0) for s in range(3)] + [rec("b", "y", s, None, "budget") for s in range(3)]
    spec = study.parse_study_text("name: opt\ntier: smoke\nalgorithms: [x, y]\nseeds: 3\n")
    full = {"study": spec.model_dump(mode="json"), "tau_max": 4.0, "algorithms": ["x", "y"], "aggregation": "olympic mean",
            "generated_at": "2026-12-03T00:00:00+00:00",
            "algorithm_details": {}, "runs": records, "errors": 0, **study.score(records, ["x", "y"], 4.0)}
    study.write_outputs(full, tmp / "out")
    return tmp / "out"


def test_study_report_reads_back_typed_and_the_svg_is_the_one_study_wrote(tmp_path: Path) -> None:
    out = _study(tmp_path)
    report = study_report.read_study(out)  # the folder, or its study.json
    assert report == study_report.read_study(out / "study.json")
    assert report.name == "opt" and report.algorithms == ["x", "y"] and report.tau_max == 4.0
    assert report.times_s["a"] == {"x": 2.2, "y": 1.1} and math.isinf(report.times_s["b"]["y"])  # missed: inf
    assert {s.algorithm for s in report.scores} == {"x", "y"}
    assert [s.score for s in report.scores] == sorted((s.score for s in report.scores), reverse=True)
    assert (out / "profile.svg").read_text() == profile_plot.profile_svg(report) + "\n"


def test_study_reader_refuses_a_file_that_is_not_a_study(tmp_path: Path) -> None:
    path = tmp_path / "study.json"
    path.write_text('{"study": {"name": "x"}}')
    with pytest.raises(study_report.StudyReportError, match=r"study.json: not a study report"):
        study_report.read_study(path)


def test_the_site_reads_side_files_only_through_typed_readers_and_never_imports_the_study_runner() -> None:
    site = {e.target for e in import_graph() if e.source.startswith("suite.site.")}
    assert "suite.studies.runner" not in site
    assert {"suite.compare.output", "suite.results.baselines", "suite.studies.report"} <= site
    for path in (Path(__file__).resolve().parents[2] / "suite" / "site").glob("*.py"):
        # pages.py, output.py and months.py read the site's OWN manifest, marker and month files (files it wrote), not a
        # side file
        assert "json.loads" not in path.read_text(encoding="utf-8") or path.name in ("pages.py", "output.py", "months.py"), \
            path.name
