"""The nightly's bisect path end to end against the local GitHub server (pytest-httpserver on 127.0.0.1): a new
change point opens its issue and starts bisect.yml with the range on the same runner kind (an old one does not);
bisect.yml's post step (scripts/ci/post_bisect.sh, run as the workflow runs it) comments the bisect's result on that
issue with the job's token."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from pytest_httpserver import HTTPServer
from support.gh_cli import HANG_GUARD_S, run_cli

from benchmarks.sim.bisect import comparator, levels
from suite.compare import bisect as bis

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ghs_test0123456789abcdefTOKEN"
REPO = "octo/bench"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/vnd.github+json",
           "X-GitHub-Api-Version": "2022-11-28"}
GOOD, BAD = "1" * 40, "2" * 40


def _point(hardware: str, sha_tail: str, metric: str = "time_per_step_s") -> dict:
    return {"workload": "cv/cifar10_resnet", "hardware": hardware, "backend": "torch", "precision": "bf16",
            "mode": "tta", "metric": metric, "index": 12, "points": 30, "before_sha": GOOD, "after_sha": sha_tail,
            "before_at": "2026-12-01T02:17:00+00:00", "after_at": "2026-12-02T02:17:00+00:00", "before": 0.1,
            "after": 0.106, "change": 0.06, "worse": True, "p_value": 0.0004,
            "id": f"cv/cifar10_resnet|{hardware}|torch|bf16|tta|{metric}|{sha_tail}"}


def _marker(key: str) -> str:
    return f"<!-- trainbench-issue:{hashlib.sha256(key.encode()).hexdigest()[:20]} -->"


def test_a_new_change_point_starts_a_bisect_and_its_result_is_posted_on_the_issue(httpserver: HTTPServer,
                                                                                   tmp_path: Path) -> None:
    new, old = _point("nvidia-h200-x1", BAD), _point("ascend-910b-x1", "3" * 40)
    (tmp_path / "history.json").write_text(json.dumps({"kind": "trainbench-history", "change_points": [new, old]}))
    env = {"GITHUB_API_URL": httpserver.url_for("").rstrip("/")}
    listing = [{"number": 5, "body": f"{_marker(old['id'])}\nold text"}]
    httpserver.expect_ordered_request(f"/repos/{REPO}/issues", method="GET").respond_with_json(listing)
    httpserver.expect_ordered_request(f"/repos/{REPO}/issues", method="POST", headers=HEADERS).respond_with_json(
        {"number": 12, "html_url": "https://x/12"}, status=201)
    httpserver.expect_ordered_request(
        f"/repos/{REPO}/actions/workflows/bisect.yml/dispatches", method="POST", headers=HEADERS,
        json={"ref": "main", "inputs": {"good": GOOD, "bad": BAD, "workload": "cv/cifar10_resnet",
                                        "metric": "step_time", "runner": "h200", "backend": "torch", "issue": "12"}},
    ).respond_with_data("", status=204)
    httpserver.expect_ordered_request(f"/repos/{REPO}/issues", method="GET").respond_with_json(listing)
    httpserver.expect_ordered_request(f"/repos/{REPO}/issues/5", method="PATCH", headers=HEADERS).respond_with_json(
        {"number": 5})
    p = run_cli(["gh", "change-issues", "--history", str(tmp_path / "history.json"), "--bisect-workflow",
                 "bisect.yml"], token=TOKEN, repo=REPO, env=env)
    assert p.returncode == 0, p.stderr
    assert "started bisect.yml on h200" in p.stdout and "result to issue #12" in p.stdout
    httpserver.check_assertions()
    sent = [(r.method, r.path) for r, _ in httpserver.log]
    assert sent.count(("POST", f"/repos/{REPO}/actions/workflows/bisect.yml/dispatches")) == 1  # the old one: none

    # the bisect job's result (the real search over a simulated range), then bisect.yml's post step
    commits = [GOOD, *(f"{i:040x}" for i in range(3, 17)), BAD]
    result = bis.bisect("cv/cifar10_resnet", "step_time", commits,
                        comparator(levels(commits, {9: 1.06}), np.random.default_rng(0)))
    assert result.status == bis.FOUND
    (tmp_path / "bisect.md").write_text(bis.to_markdown(result))
    httpserver.clear()
    httpserver.expect_ordered_request(f"/repos/{REPO}/issues/12/comments", method="GET").respond_with_json([])
    httpserver.expect_ordered_request(f"/repos/{REPO}/issues/12/comments", method="POST", headers=HEADERS,
                                      ).respond_with_json({"id": 77, "html_url": "https://x/c77"}, status=201)
    clean = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    done = subprocess.run(["bash", str(ROOT / "scripts/ci/post_bisect.sh")], capture_output=True, text=True,
                          cwd=ROOT, timeout=HANG_GUARD_S,
                          env={**clean, **env, "PYTHONPATH": str(ROOT), "GITHUB_TOKEN": TOKEN, "PYTHON": sys.executable,
                               "GITHUB_REPOSITORY": REPO, "ISSUE": "12", "RESULT": str(tmp_path / "bisect.md")})
    assert done.returncode == 0, done.stderr
    httpserver.check_assertions()
    body = json.loads(httpserver.log[-1][0].get_data())["body"]
    assert body.startswith("<!-- trainbench:bisect -->") and f"first bad commit {commits[9][:12]}" in body
    assert TOKEN not in done.stdout + done.stderr


def test_the_post_step_refuses_an_issue_that_is_not_a_number(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(ROOT / "scripts/ci/post_bisect.sh")], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, env={**os.environ, "ISSUE": "12; rm -rf /", "RESULT": "x"})
    assert done.returncode == 2 and "not an issue number" in done.stderr
