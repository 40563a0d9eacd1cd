"""The workload page of an RL post-training workload shows each run's step split into rollout and training (the
Result's `phases`), and a workload without phases shows no such table."""

from __future__ import annotations

from pathlib import Path

from benchmarks.sim.results import site_result
from suite.results.record import write_result
from suite.site.build import build_site


def test_the_workload_page_shows_the_rollout_and_training_split(tmp_path: Path) -> None:
    root = tmp_path / "results"
    for seed, (gen, train) in enumerate(((0.0372, 0.0873), (0.0403, 0.0810))):
        r = site_result("rl/arithmetic_grpo", "cpu-test-2c", seed=seed, tta_s=30.0 + seed, target=0.6)
        r.phases = {"rollout_s_per_step": gen, "training_s_per_step": train, "seconds": {"gen": gen * 200}}
        write_result(root, r)
    write_result(root, site_result("cv/digits_cnn", "cpu-test-2c"))
    build_site(root, tmp_path / "out")
    (grpo,) = (tmp_path / "out" / "w").glob("rl-arithmetic_grpo-*.html")
    html = grpo.read_text()
    table = html[html.index("<h2>RL step phases</h2>"):]
    table = table[: table.index("</table>")]
    assert table.count("<tr><td") == 2
    for value in ("0.037", "0.087", "0.040", "0.081"):
        assert value in table, value
    (digits,) = (tmp_path / "out" / "w").glob("cv-digits_cnn-*.html")
    assert "RL step phases" not in digits.read_text()
