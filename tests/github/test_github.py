"""suite.github against a real HTTP server on 127.0.0.1 speaking the GitHub REST endpoints we use."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from support.gh_cli import run_cli
from werkzeug import Response

from suite import github
from suite.github import AuthError, GitHub, GitHubError, NotFound, RateLimited, RetryPolicy

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ghs_test0123456789abcdefTOKEN"
REPO = "octo/bench"
SHA = "a" * 40
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/vnd.github+json",
           "X-GitHub-Api-Version": "2022-11-28"}


class Clock:
    """A fake clock for the retry waits: records each sleep instead of sleeping."""

    def __init__(self, now: float = 1_700_000_000.0):
        self.now, self.sleeps = now, []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def gh(httpserver: HTTPServer, clock: Clock) -> GitHub:
    return GitHub(token=TOKEN, api_url=httpserver.url_for("").rstrip("/"),
                  retry=RetryPolicy(max_attempts=4, max_total_wait_s=120, base_s=1.0),
                  sleep=clock.sleep, clock=clock.time)


def _sent(httpserver: HTTPServer) -> list[tuple[str, str]]:
    return [(req.method, req.path) for req, _ in httpserver.log]


# ---- sticky comment -------------------------------------------------------------------------------------


def test_sticky_comment_is_created_when_none_carries_the_marker(httpserver, gh):
    httpserver.expect_ordered_request(f"/repos/{REPO}/issues/7/comments", method="GET", headers=HEADERS,
                                      query_string="per_page=100").respond_with_json(
        [{"id": 1, "body": "nice PR", "user": {"login": "alice"}}])
    httpserver.expect_ordered_request(
        f"/repos/{REPO}/issues/7/comments", method="POST", headers=HEADERS,
        json={"body": "<!-- trainbench:bench -->\n## report\n"},
    ).respond_with_json({"id": 99, "html_url": "https://x/99"}, status=201)
    done = gh.sticky_comment(REPO, 7, "## report\n")
    httpserver.check_assertions()
    assert done == {"action": "created", "id": 99, "url": "https://x/99"}


def test_sticky_comment_is_updated_in_place_across_pages_and_only_the_bots(httpserver, gh):
    base = httpserver.url_for(f"/repos/{REPO}/issues/7/comments")
    httpserver.expect_ordered_request(f"/repos/{REPO}/issues/7/comments", method="GET",
                                      query_string="per_page=100").respond_with_json(
        [{"id": 1, "body": "<!-- trainbench:bench -->\nforged by a user", "user": {"login": "mallory"}}],
        headers={"Link": f'<{base}?per_page=100&page=2>; rel="next", <{base}?per_page=100&page=2>; rel="last"'})
    httpserver.expect_ordered_request(f"/repos/{REPO}/issues/7/comments", method="GET",
                                      query_string="per_page=100&page=2").respond_with_json(
        [{"id": 5, "body": "<!-- trainbench:bench -->\nold", "user": {"login": "github-actions[bot]"}}])
    httpserver.expect_ordered_request(f"/repos/{REPO}/issues/comments/5", method="PATCH", headers=HEADERS,
                                      json={"body": "<!-- trainbench:bench -->\nnew\n"}).respond_with_json(
        {"id": 5, "html_url": "https://x/5"})
    done = gh.sticky_comment(REPO, 7, "new\n", author="github-actions[bot]")
    httpserver.check_assertions()
    assert done["action"] == "updated" and done["id"] == 5


def test_an_oversized_comment_is_cut_to_githubs_limit(httpserver, gh):
    httpserver.expect_request(f"/repos/{REPO}/issues/3/comments", method="GET").respond_with_json([])
    httpserver.expect_request(f"/repos/{REPO}/issues/3/comments", method="POST").respond_with_json(
        {"id": 1}, status=201)
    gh.sticky_comment(REPO, 3, "x" * 100_000)
    body = json.loads(httpserver.log[-1][0].data)["body"]
    assert len(body) <= github.MAX_COMMENT_CHARS and body.endswith("artifacts)")


def test_find_pull_request_for_a_fork_head(httpserver, gh):
    httpserver.expect_ordered_request(f"/repos/{REPO}/commits/{SHA}/pulls", method="GET").respond_with_json([])
    httpserver.expect_ordered_request(f"/repos/{REPO}/pulls", method="GET",
                                      query_string="per_page=100&state=open&head=fork%3Afeature",
                                      ).respond_with_json([
        {"number": 41, "state": "open", "head": {"sha": "b" * 40}},
        {"number": 42, "state": "open", "head": {"sha": SHA}},
    ])
    assert gh.find_pull_request(REPO, SHA, "fork:feature") == 42
    httpserver.check_assertions()


# ---- statuses, checks -----------------------------------------------------------------------------------


def test_commit_status_body(httpserver, gh):
    httpserver.expect_request(f"/repos/{REPO}/statuses/{SHA}", method="POST", headers=HEADERS, json={
        "state": "failure", "context": "trainbench/h200", "description": "regression found",
        "target_url": "https://runs/1"}).respond_with_json({"id": 1, "state": "failure"}, status=201)
    assert gh.commit_status(REPO, SHA, "failure", "trainbench/h200", "regression found", "https://runs/1")[
        "state"] == "failure"
    httpserver.check_assertions()


def test_check_run_body(httpserver, gh):
    httpserver.expect_request(f"/repos/{REPO}/check-runs", method="POST", headers=HEADERS, json={
        "name": "trainbench", "head_sha": SHA, "status": "completed", "conclusion": "success",
        "output": {"title": "no regression", "summary": "## all good"}}).respond_with_json({"id": 3}, status=201)
    assert gh.check_run(REPO, SHA, "trainbench", "success", "no regression", "## all good")["id"] == 3
    httpserver.check_assertions()


@pytest.mark.parametrize("text,state", [("0", "success"), ("1\n", "failure"), ("2", "error"), ("7", "error"),
                                        ("rm -rf /", "error"), ("", "error")])
def test_verdict_from_an_untrusted_exit_code_file(text, state):
    assert github.state_from_exit_code(text) == state


def test_bad_inputs_are_refused_before_any_request(gh):
    with pytest.raises(ValueError, match="OWNER/NAME"):
        gh.commit_status("../../etc", SHA, "success", "c")
    with pytest.raises(ValueError, match="40-character"):
        gh.commit_status(REPO, "main", "success", "c")
    with pytest.raises(ValueError, match="state"):
        gh.commit_status(REPO, SHA, "green", "c")


# ---- retries and errors ---------------------------------------------------------------------------------


def test_500_then_success_retries_with_backoff(httpserver, gh, clock):
    path = f"/repos/{REPO}/statuses/{SHA}"
    httpserver.expect_ordered_request(path, method="POST").respond_with_json({"message": "boom"}, status=500)
    httpserver.expect_ordered_request(path, method="POST").respond_with_json({"message": "boom"}, status=502)
    httpserver.expect_ordered_request(path, method="POST", headers=HEADERS).respond_with_json({"id": 1}, status=201)
    gh.commit_status(REPO, SHA, "success", "c")
    httpserver.check_assertions()
    assert len(clock.sleeps) == 2
    assert 0.5 <= clock.sleeps[0] <= 1.0 and 1.0 <= clock.sleeps[1] <= 2.0  # doubling, with jitter


def test_429_honours_retry_after(httpserver, gh, clock):
    path = f"/repos/{REPO}/issues/1/comments"
    httpserver.expect_ordered_request(path, method="GET").respond_with_json(
        {"message": "slow down"}, status=429, headers={"Retry-After": "7"})
    httpserver.expect_ordered_request(path, method="GET").respond_with_json([])
    httpserver.expect_ordered_request(path, method="POST").respond_with_json({"id": 1}, status=201)
    gh.sticky_comment(REPO, 1, "hi")
    httpserver.check_assertions()
    assert clock.sleeps == [7.0]


def test_secondary_rate_limit_403_with_reset_header(httpserver, gh, clock):
    path = f"/repos/{REPO}/statuses/{SHA}"
    reset = int(clock.now) + 30
    httpserver.expect_ordered_request(path, method="POST").respond_with_json(
        {"message": "You have exceeded a secondary rate limit."}, status=403,
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)})
    httpserver.expect_ordered_request(path, method="POST").respond_with_json({"id": 1}, status=201)
    gh.commit_status(REPO, SHA, "success", "c")
    httpserver.check_assertions()
    assert clock.sleeps == [pytest.approx(31.0)]  # until the reset, plus a second of margin


def test_secondary_rate_limit_without_headers_waits_a_minute(httpserver, gh, clock):
    path = f"/repos/{REPO}/statuses/{SHA}"
    httpserver.expect_ordered_request(path, method="POST").respond_with_json(
        {"message": "You have exceeded a secondary rate limit. Please wait a few minutes."}, status=403)
    httpserver.expect_ordered_request(path, method="POST").respond_with_json({"id": 1}, status=201)
    gh.commit_status(REPO, SHA, "success", "c")
    assert clock.sleeps == [60.0]


def test_rate_limit_longer_than_the_budget_gives_up_at_once(httpserver, gh, clock):
    httpserver.expect_request(f"/repos/{REPO}/statuses/{SHA}", method="POST").respond_with_json(
        {"message": "API rate limit exceeded"}, status=429, headers={"Retry-After": "3600"})
    with pytest.raises(RateLimited, match="past the retry budget"):
        gh.commit_status(REPO, SHA, "success", "c")
    assert clock.sleeps == [] and len(httpserver.log) == 1


def test_5xx_attempts_are_bounded(httpserver, gh, clock):
    httpserver.expect_request(f"/repos/{REPO}/statuses/{SHA}", method="POST").respond_with_json(
        {"message": "unicorn"}, status=503)
    with pytest.raises(GitHubError, match="HTTP 503.*gave up after 4 attempts"):
        gh.commit_status(REPO, SHA, "success", "c")
    assert len(httpserver.log) == 4 and len(clock.sleeps) == 3


def test_401_is_a_clear_error_and_not_retried(httpserver, gh, clock):
    httpserver.expect_request(f"/repos/{REPO}/statuses/{SHA}", method="POST").respond_with_json(
        {"message": "Bad credentials"}, status=401)
    with pytest.raises(AuthError, match="401 unauthorized.*Bad credentials.*GITHUB_TOKEN"):
        gh.commit_status(REPO, SHA, "success", "c")
    assert len(httpserver.log) == 1 and clock.sleeps == []


def test_403_permission_names_the_fix(httpserver, gh):
    httpserver.expect_request(f"/repos/{REPO}/statuses/{SHA}", method="POST").respond_with_json(
        {"message": "Resource not accessible by integration"}, status=403)
    with pytest.raises(AuthError, match="403 forbidden.*permissions:"):
        gh.commit_status(REPO, SHA, "success", "c")
    assert len(httpserver.log) == 1


def test_404_is_not_found(httpserver, gh):
    httpserver.expect_request(f"/repos/{REPO}/issues/9/comments", method="GET").respond_with_json(
        {"message": "Not Found"}, status=404)
    with pytest.raises(NotFound, match="404 not found"):
        gh.sticky_comment(REPO, 9, "x")


def test_no_token_is_a_clear_error():
    with pytest.raises(AuthError, match="set GITHUB_TOKEN"):
        github.token_from_env({})


# ---- artifacts ------------------------------------------------------------------------------------------


def _zip(entries: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o120777 << 16)
            zf.writestr(info, target)
    return buf.getvalue()


def _artifact_server(httpserver, blob: bytes, name: str = "bench-h200"):
    httpserver.expect_request(f"/repos/{REPO}/actions/runs/77/artifacts", method="GET", headers=HEADERS,
                              ).respond_with_json({"total_count": 2, "artifacts": [
        {"id": 11, "name": name, "expired": False, "size_in_bytes": len(blob)},
        {"id": 12, "name": "other", "expired": False, "size_in_bytes": 1}]})
    # GitHub answers the zip endpoint with a redirect to a pre-signed blob URL
    httpserver.expect_request(f"/repos/{REPO}/actions/artifacts/11/zip", method="GET").respond_with_response(
        Response(status=302, headers={"Location": httpserver.url_for("/blob/11.zip?sig=abc")}))
    httpserver.expect_request("/blob/11.zip", method="GET").respond_with_data(blob)


def test_artifact_download_follows_the_redirect_without_the_token(httpserver, gh, tmp_path):
    blob = _zip({"report.md": b"## report\n", "results/h/cv/x/torch/1.json": b"{}", "compare-exit-code": b"1\n"})
    _artifact_server(httpserver, blob)
    arts = [a for a in gh.list_artifacts(REPO, 77) if a["name"].startswith("bench-")]
    files = gh.download_artifact(REPO, arts[0], tmp_path / "bench-h200")
    assert sorted(p.relative_to(tmp_path / "bench-h200").as_posix() for p in files) == [
        "compare-exit-code", "report.md", "results/h/cv/x/torch/1.json"]
    assert (tmp_path / "bench-h200/report.md").read_text() == "## report\n"
    blob_req = [req for req, _ in httpserver.log if req.path == "/blob/11.zip"]
    assert len(blob_req) == 1 and "Authorization" not in blob_req[0].headers


@pytest.mark.parametrize("entries,links,why", [
    ({"../../evil.sh": b"x"}, None, "escapes"),
    ({"/etc/evil": b"x"}, None, "escapes"),
    ({"ok.md": b"x"}, {"link": "/etc/passwd"}, "link"),
])
def test_hostile_artifact_entries_are_refused(tmp_path, entries, links, why):
    with pytest.raises(GitHubError, match=why):
        github.safe_extract(_zip(entries, links), tmp_path / "d")
    assert not (tmp_path / "evil.sh").exists() and not (tmp_path.parent / "evil.sh").exists()


def test_zip_bomb_and_garbage_are_refused(tmp_path):
    with pytest.raises(GitHubError, match="zip bomb"):
        github.safe_extract(_zip({"big": b"0" * 10_000}), tmp_path / "d", max_bytes=1000)
    with pytest.raises(GitHubError, match="not a valid zip"):
        github.safe_extract(b"PK not really", tmp_path / "d")


# ---- runner registration, job summary -------------------------------------------------------------------


def test_runner_registration_token_and_config_command(httpserver, gh):
    httpserver.expect_request(f"/repos/{REPO}/actions/runners/registration-token", method="POST",
                              headers=HEADERS).respond_with_json(
        {"token": "REGTOKEN123", "expires_at": "2026-12-03T08:00:00Z"}, status=201)
    data = gh.runner_registration_token(repo=REPO)
    cmd = github.runner_config_command("https://github.com/octo/bench", data["token"], ["gpu", "h200"], "h200-1")
    assert cmd[:2] == ["./config.sh", "--unattended"]
    assert cmd[cmd.index("--labels") + 1] == "gpu,h200" and cmd[cmd.index("--token") + 1] == "REGTOKEN123"
    assert "--ephemeral" in cmd
    assert github.redact("token REGTOKEN123") == "token ***"  # the registration token is a secret too
    with pytest.raises(ValueError, match="label"):
        github.runner_config_command("u", "t", ["gpu;rm -rf /"])


def test_step_summary_appends_and_caps(tmp_path):
    target = tmp_path / "summary.md"
    github.write_step_summary("# one\n", target)
    github.write_step_summary("two", target)
    assert target.read_text() == "# one\ntwo\n"
    github.write_step_summary("é" * github.MAX_SUMMARY_BYTES, target)
    assert target.stat().st_size <= github.MAX_SUMMARY_BYTES + 20
    with pytest.raises(ValueError, match="GITHUB_STEP_SUMMARY"):
        os.environ.pop("GITHUB_STEP_SUMMARY", None)
        github.write_step_summary("x")


# ---- the CLI, end to end against the loopback server ----------------------------------------------------


def _cli(httpserver, *args: str, token: str = TOKEN, extra_env: dict[str, str] | None = None):
    return run_cli(args, token=token, repo=REPO,
                   env={"GITHUB_API_URL": httpserver.url_for("").rstrip("/"), **(extra_env or {})})


def test_cli_comment_by_head_sha_and_status_from_exit_code_file(httpserver, tmp_path):
    (tmp_path / "a.md").write_text("## h200\nok\n")
    (tmp_path / "b.md").write_text("## 910b\nslower\n")
    (tmp_path / "code").write_text("1\n")
    httpserver.expect_ordered_request(f"/repos/{REPO}/commits/{SHA}/pulls", method="GET").respond_with_json(
        [{"number": 8, "state": "open", "head": {"sha": SHA}}])
    httpserver.expect_ordered_request(f"/repos/{REPO}/issues/8/comments", method="GET").respond_with_json([])
    httpserver.expect_ordered_request(f"/repos/{REPO}/issues/8/comments", method="POST", headers=HEADERS, json={
        "body": "<!-- trainbench:bench -->\n## h200\nok\n\n## 910b\nslower\n"}).respond_with_json(
        {"id": 1, "html_url": "https://x/1"}, status=201)
    httpserver.expect_ordered_request(f"/repos/{REPO}/statuses/{SHA}", method="POST", headers=HEADERS, json={
        "state": "failure", "context": "trainbench/h200", "description": "regression found"}).respond_with_json(
        {"id": 2}, status=201)
    p = _cli(httpserver, "gh", "comment", "--head-sha", SHA, "--body-file", str(tmp_path / "a.md"),
             "--body-file", str(tmp_path / "b.md"))
    assert p.returncode == 0, p.stderr
    assert "created comment 1" in p.stdout
    p = _cli(httpserver, "gh", "status", "--sha", SHA, "--exit-code-file", str(tmp_path / "code"),
             "--context", "trainbench/h200")
    assert p.returncode == 0, p.stderr
    httpserver.check_assertions()


def test_cli_download_artifact_and_summary(httpserver, tmp_path):
    _artifact_server(httpserver, _zip({"report.md": b"# r\n"}))
    p = _cli(httpserver, "gh", "download-artifact", "--run-id", "77", "--prefix", "bench-", "--dest",
             str(tmp_path / "arts"))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "arts/bench-h200/report.md").read_text() == "# r\n"
    assert not (tmp_path / "arts/other").exists()
    summary = tmp_path / "summary.md"
    p = _cli(httpserver, "gh", "summary", "--body-file", str(tmp_path / "arts/bench-h200/report.md"),
             extra_env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert p.returncode == 0, p.stderr
    assert summary.read_text() == "# r\n"


def test_cli_runner_register_prints_config_with_the_token_hidden(httpserver):
    httpserver.expect_request(f"/repos/{REPO}/actions/runners/registration-token", method="POST").respond_with_json(
        {"token": "REGTOKEN123", "expires_at": "2026-12-03T08:00:00Z"}, status=201)
    p = _cli(httpserver, "runner", "register", "--labels", "gpu,h200", "--name", "h200-a",
             extra_env={"GITHUB_SERVER_URL": "https://github.example"})
    assert p.returncode == 0, p.stderr
    assert "./config.sh --unattended --url https://github.example/octo/bench --token '***' --labels gpu,h200" in p.stdout
    assert "REGTOKEN123" not in p.stdout + p.stderr
    p = _cli(httpserver, "runner", "register", "--labels", "gpu", "--show-token")
    assert "--token REGTOKEN123" in p.stdout


def test_cli_errors_exit_1_for_api_failures_and_2_for_bad_input(httpserver, tmp_path):
    httpserver.expect_request(f"/repos/{REPO}/statuses/{SHA}", method="POST").respond_with_json(
        {"message": "Bad credentials"}, status=401)
    p = _cli(httpserver, "gh", "status", "--sha", SHA, "--state", "success")
    assert p.returncode == 1 and "401 unauthorized" in p.stderr and "Traceback" not in p.stderr
    p = _cli(httpserver, "gh", "status", "--sha", "nope", "--state", "success")
    assert p.returncode == 2 and "40-character" in p.stderr
    p = _cli(httpserver, "gh", "status", "--sha", SHA, "--state", "success", token="")
    assert p.returncode == 1 and "set GITHUB_TOKEN" in p.stderr


def test_bench_comment_script_posts_statuses_and_one_comment(httpserver, tmp_path):
    """scripts/ci/post_bench_results.sh as bench-comment.yml runs it, on downloaded (untrusted) artifacts."""
    arts = tmp_path / "bench"
    for hw, code, report in (("h200", "0", "## h200\nok\n"), ("910b", "1", "## 910b\nslower\n")):
        (arts / f"bench-{hw}").mkdir(parents=True)
        (arts / f"bench-{hw}/compare-exit-code").write_text(code)
        (arts / f"bench-{hw}/report.md").write_text(report)
    (arts / "bench-$(touch pwned)").mkdir()  # a hostile artifact name is skipped, never evaluated
    (arts / "bench-noverdict").mkdir()  # compare never ran: the status says error
    for hw, state in (("910b", "failure"), ("h200", "success"), ("noverdict", "error")):
        httpserver.expect_request(f"/repos/{REPO}/statuses/{SHA}", method="POST", json={
            "state": state, "context": f"trainbench/{hw}",
            "description": {"success": "no regression", "failure": "regression found",
                            "error": "benchmark or compare failed"}[state],
            "target_url": "https://runs/9"}).respond_with_json({"id": 1}, status=201)
    httpserver.expect_request(f"/repos/{REPO}/commits/{SHA}/pulls").respond_with_json(
        [{"number": 8, "state": "open", "head": {"sha": SHA}}])
    httpserver.expect_request(f"/repos/{REPO}/issues/8/comments", method="GET").respond_with_json([])
    httpserver.expect_request(f"/repos/{REPO}/issues/8/comments", method="POST", json={
        "body": "<!-- trainbench:bench -->\n## 910b\nslower\n\n## h200\nok\n"}).respond_with_json({"id": 2}, status=201)
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    env.update({"PYTHONPATH": str(ROOT), "PYTHON": sys.executable, "GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": REPO,
                "HEAD_SHA": SHA,
                "RUN_URL": "https://runs/9", "GITHUB_API_URL": httpserver.url_for("").rstrip("/")})
    p = subprocess.run(["bash", str(ROOT / "scripts/ci/post_bench_results.sh"), str(arts)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "unexpected name" in p.stderr and not (tmp_path / "pwned").exists()
    posted = [(r.method, r.path) for r, _ in httpserver.log]
    assert posted.count(("POST", f"/repos/{REPO}/statuses/{SHA}")) == 3
    assert posted.count(("POST", f"/repos/{REPO}/issues/8/comments")) == 1
    assert all(resp.status_code < 300 for _, resp in httpserver.log)


@pytest.fixture
def blob_host():
    """A second server on another loopback address and port: the pre-signed blob store GitHub redirects to."""
    server = HTTPServer(host="127.0.0.2", port=0)
    server.start()
    yield server
    server.clear()
    if server.is_running():
        server.stop()


def test_artifact_redirect_to_another_host_and_port_gets_no_token(httpserver, gh, tmp_path, blob_host):
    """Issue 50 item 18: as GitHub does, the zip endpoint answers 302 to a blob store on another host (and port);
    the download follows it and the token never reaches that host, while the API call itself carried it."""
    blob = _zip({"report.md": b"## elsewhere\n"})
    assert (blob_host.host, blob_host.port) != ("127.0.0.1", httpserver.port)
    httpserver.expect_request(f"/repos/{REPO}/actions/artifacts/21/zip", method="GET", headers=HEADERS
                              ).respond_with_response(
        Response(status=302, headers={"Location": blob_host.url_for("/blob/21.zip?sig=abc")}))
    blob_host.expect_request("/blob/21.zip", method="GET").respond_with_data(blob)
    files = gh.download_artifact(REPO, {"id": 21, "name": "bench-h100", "size_in_bytes": len(blob)},
                                 tmp_path / "bench-h100")
    assert [p.name for p in files] == ["report.md"] and files[0].read_text() == "## elsewhere\n"
    (api_req,) = [req for req, _ in httpserver.log if req.path.endswith("/21/zip")]
    assert api_req.headers.get("Authorization") == f"Bearer {TOKEN}"  # the token was there to leak
    (blob_req,) = [req for req, _ in blob_host.log]
    assert "Authorization" not in blob_req.headers and TOKEN not in str(blob_req.headers)
