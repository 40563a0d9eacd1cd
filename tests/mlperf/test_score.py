"""MLPerf's score, checked against mlperf_logging's own result_summarizer run live on the same folders (a subset of
the published v5.1 logs with the dirt a scorer must handle: tests/mlperf/data/PROVENANCE.md)."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace

import pytest
from support import mlperf_fixture

from suite.mlperf import importer, scan, score, tree

RULESET = "5.1.0"


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = mlperf_fixture.unpack(tmp_path_factory.mktemp("mlperf"))
    walk = tree.walk(root, importer.known_benchmarks(RULESET))
    logs = [log for b in walk.benchmarks for log in b.logs]
    infos = scan.read_all(logs, RULESET, scan.Cache(None, RULESET), workers=2)
    rows = score.summarize(walk, infos)  # before the summarizer runs: it rewrites scaling.json in what it reads
    csv_path = root.parent / "summary.csv"
    subs = ",".join(p.name for p in tree.submitter_dirs(root))
    p = subprocess.run([sys.executable, "-m", "mlperf_logging.result_summarizer", f"{root}/{{{subs}}}", "training",
                        RULESET, "-csv", str(csv_path)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return walk, infos, rows, score.read_summary_csv(csv_path)


@pytest.mark.slow  # the summarizer itself takes ~10-20 s on these 60 logs under load
def test_every_row_and_cell_equals_the_result_summarizer(scored):
    walk, infos, rows, summary = scored
    benchmarks = list(importer.known_benchmarks(RULESET))
    cmp = score.compare_with_summary(rows, summary, benchmarks)
    assert cmp.mismatches == []
    assert cmp.rows == len(summary) == 5 and cmp.cells == 5 * len(benchmarks)
    assert cmp.largest_rel <= 1e-9
    by_system = {r.system_file: r for r in rows}
    # the dirt is in there: one truncated log (dropped, score over nine), two dropped (infinite: an empty cell)
    v51 = by_system["PowerEdge-XE9680-MI300X-192GB_n1_v5.1"].scores["llama2_70b_lora"]
    assert (v51.runs, v51.dropped, len(v51.counted_minutes)) == (10, 1, 9) and math.isfinite(v51.minutes)
    v50 = by_system["PowerEdge-XE9680-MI300X-192GB_n1_v5.0"].scores["llama2_70b_lora"]
    assert (v50.dropped, v50.minutes) == (2, math.inf)
    # the RCP normalization of the published scaling.json is applied (AMD's llama2_70b_lora: 1.00337)
    amd = by_system["MI355X_EPYC_9575F_pytorch"].scores["llama2_70b_lora"]
    assert amd.scaling_factor > 1.0
    # the aborted run is compliant and the summarizer counts its time: so do we
    aborted = [i for i in infos.values() if i.run_stop_status == "aborted"]
    assert len(aborted) == 1 and aborted[0].score_valid


@pytest.mark.slow
def test_the_comparison_fails_a_score_that_is_not_mlperfs(scored):
    """Negative control: the same rows without the RCP normalization, or with the slowest run counted, differ."""
    walk, infos, rows, summary = scored
    benchmarks = list(importer.known_benchmarks(RULESET))
    unscaled = [replace(r, scores={b: replace(s, minutes=s.minutes / s.scaling_factor) for b, s in r.scores.items()})
                for r in rows]
    assert any("MI355X" in m or "SMCI355X" in m for m in score.compare_with_summary(unscaled, summary, benchmarks).mismatches)
    plain_mean = [replace(r, scores={b: replace(s, minutes=sum(s.counted_minutes) / len(s.counted_minutes)
                                                if s.counted_minutes and math.isfinite(s.minutes) else s.minutes)
                                     for b, s in r.scores.items()}) for r in rows]
    assert score.compare_with_summary(plain_mean, summary, benchmarks).mismatches


def test_olympic_mean_drops_fastest_and_slowest_and_a_dropped_run_is_the_slowest():
    assert score.olympic([3.0, 1.0, 2.0, 10.0], dropped=0, max_drop=1) == 2.5
    assert score.olympic([3.0, 1.0, 2.0], dropped=1, max_drop=1) == 2.5  # the dropped run took the top slot
    assert score.olympic([1.0], dropped=1, max_drop=1) is None
