"""Issue 35 items 13-16, the GitHub helpers: a total deadline per request (a real trickling server on
loopback), artifacts extracted whole or not at all, the rate limit named as such, bounded reads of the files
the user names."""

from __future__ import annotations

import io
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
from support.gh_cli import HANG_GUARD_S, ROOT, run_cli
from werkzeug import Response

from suite import github
from suite.github import GitHub, GitHubError, RateLimited, RetryPolicy

TOKEN = "ghs_round3_0123456789abcdefTOKEN"
REPO = "octo/bench"
SHA = "b" * 40


# ---- item 13: a server that sends one byte at a time ------------------------------------------------------


class Trickle:
    """A real HTTP server on 127.0.0.1 that answers every request one byte every `every_s` seconds, in its
    headers (`where="headers"`) or in a long body: each read gets a byte well inside any read timeout."""

    def __init__(self, where: str, every_s: float = 0.2, for_s: float = 60.0):
        self.where, self.every_s, self.for_s = where, every_s, for_s
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.requests = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                got += chunk
            self.requests += 1
            if self.where == "headers":
                head, drip = b"HTTP/1.1 200 OK\r\n", b"X-Slow: " + b"a" * 100_000
            else:
                head, drip = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n", \
                    b"[" + b" " * 99_999
            try:
                conn.sendall(head)
                end = time.monotonic() + self.for_s
                for byte in drip:
                    if self.stop.is_set() or time.monotonic() > end:
                        return
                    conn.sendall(bytes([byte]))
                    time.sleep(self.every_s)
            except OSError:
                return  # the client hung up: what the deadline is for

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture(params=["headers", "body"])
def trickle(request):
    server = Trickle(request.param)
    yield server
    server.close()


def _gh(api_url: str, **kw) -> GitHub:
    return GitHub(token=TOKEN, api_url=api_url.rstrip("/"), timeout_s=1.0,
                  retry=RetryPolicy(max_attempts=3, max_total_wait_s=5, base_s=0.01), **kw)


def test_a_trickling_api_is_cut_at_the_deadline(trickle):
    # `gh comment`'s calls: the per-read timeout (1 s) never trips, one byte comes every 0.2 s
    started = time.monotonic()
    with pytest.raises(GitHubError, match="within the 2 s deadline") as e:
        _gh(trickle.url(), deadline_s=2.0).sticky_comment(REPO, 7, "report")
    took = time.monotonic() - started
    assert 1.9 < took < 20, took  # cut at the deadline, not after the server's 60 s of dripping
    assert "not retried" in str(e.value) and trickle.requests == 1


def test_a_trickling_artifact_blob_is_cut_at_its_deadline(httpserver, trickle, tmp_path):
    # `gh download-artifact`: the API redirects to a pre-signed blob URL, and that server trickles
    httpserver.expect_request(f"/repos/{REPO}/actions/artifacts/11/zip").respond_with_response(
        Response(status=302, headers={"Location": trickle.url("/blob/11.zip")}))
    started = time.monotonic()
    with pytest.raises(GitHubError, match="not complete within 2 s"):
        _gh(httpserver.url_for(""), deadline_s=2.0).download_artifact(
            REPO, {"id": 11, "name": "bench-h200", "size_in_bytes": 100}, tmp_path / "bench-h200")
    assert time.monotonic() - started < 20
    assert trickle.requests == 1 and not (tmp_path / "bench-h200").exists()


def test_a_fast_answer_is_untouched_by_the_deadline(httpserver):
    httpserver.expect_request(f"/repos/{REPO}/statuses/{SHA}", method="POST").respond_with_json({"id": 3}, status=201)
    gh = _gh(httpserver.url_for(""), deadline_s=2.0)
    for _ in range(3):  # a kept-alive connection is reused across calls, each under its own deadline
        assert gh.commit_status(REPO, SHA, "success", "ctx")["id"] == 3
    time.sleep(2.5)  # past the deadline of every call above: no timer left shuts the pooled connection
    assert gh.commit_status(REPO, SHA, "success", "ctx")["id"] == 3


# ---- item 14: an artifact is extracted whole or not at all -------------------------------------------------


def _zip(entries: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return buf.getvalue()


CLASH = [("x.txt", b"first\n"), ("a/b", b"inside a\n"), ("a", b"a file named like the folder\n")]


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) if folder.exists() else []


def test_a_file_folder_clash_leaves_nothing_behind(tmp_path):
    with pytest.raises(GitHubError, match=r"entry 'a' cannot be written .*both a file and a folder"):
        github.safe_extract(_zip(CLASH), tmp_path / "d")
    assert _files(tmp_path) == []  # neither x.txt nor a/b, and no staging folder


def test_extracting_into_an_existing_folder_checks_every_file_before_moving_one(tmp_path):
    dest = tmp_path / "d"
    assert len(github.safe_extract(_zip([("report.md", b"v1\n"), ("keep.md", b"k\n")]), dest)) == 2
    (dest / "sub").write_text("a file where the artifact has a folder\n")
    with pytest.raises(GitHubError, match="needs the folder"):
        github.safe_extract(_zip([("report.md", b"v2\n"), ("sub/x.json", b"{}")]), dest)
    assert (dest / "report.md").read_text() == "v1\n"  # not half replaced
    github.safe_extract(_zip([("report.md", b"v2\n")]), dest)
    assert (dest / "report.md").read_text() == "v2\n" and _files(tmp_path) == ["d", "d/keep.md", "d/report.md",
                                                                                 "d/sub"]


def test_cli_reports_a_bad_artifact_and_still_fetches_the_later_ones(httpserver, tmp_path):
    blobs = {11: _zip(CLASH), 12: _zip([("report.md", b"# fine\n")])}
    httpserver.expect_request(f"/repos/{REPO}/actions/runs/77/artifacts").respond_with_json({"artifacts": [
        {"id": 11, "name": "bench-clash", "expired": False, "size_in_bytes": len(blobs[11])},
        {"id": 12, "name": "bench-good", "expired": False, "size_in_bytes": len(blobs[12])}]})
    for i, blob in blobs.items():
        httpserver.expect_request(f"/repos/{REPO}/actions/artifacts/{i}/zip").respond_with_data(blob)
    p = run_cli(["gh", "download-artifact", "--run-id", "77", "--prefix", "bench-", "--dest", str(tmp_path / "arts")],
                token=TOKEN, repo=REPO, env={"GITHUB_API_URL": httpserver.url_for("").rstrip("/")})
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr and "github: artifact 'bench-clash': the artifact entry 'a'" in p.stderr
    assert "bench-good: 1 file(s)" in p.stdout
    assert _files(tmp_path / "arts") == ["bench-good", "bench-good/report.md"]


# ---- item 15: a spent rate limit is named as such, with its reset time -------------------------------------

NOW = 1_700_000_000.0


def _spent_limit(httpserver, reset: float) -> None:
    httpserver.expect_request(f"/repos/{REPO}/statuses/{SHA}", method="POST").respond_with_json(
        {"message": "API rate limit exceeded for installation ID 1."}, status=403,
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Limit": "5000", "X-RateLimit-Reset": str(int(reset))})


def test_a_403_with_no_requests_left_is_the_rate_limit_not_a_permission(httpserver):
    _spent_limit(httpserver, NOW + 3600)
    gh = GitHub(token=TOKEN, api_url=httpserver.url_for("").rstrip("/"), clock=lambda: NOW,
                retry=RetryPolicy(max_attempts=3, max_total_wait_s=60), sleep=lambda s: None)
    with pytest.raises(RateLimited) as e:
        gh.commit_status(REPO, SHA, "success", "ctx")
    assert "lacks a permission" not in str(e.value)
    assert "rate limit of this token is spent; it resets at 2023-11-14 23:13:20 UTC (in 60 min)" in str(e.value)


def test_cli_names_the_rate_limit_and_its_reset(httpserver):
    _spent_limit(httpserver, time.time() + 1800)
    p = run_cli(["gh", "status", "--sha", SHA, "--state", "success"], token=TOKEN, repo=REPO,
                env={"GITHUB_API_URL": httpserver.url_for("").rstrip("/")})
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "lacks a permission" not in p.stderr and "rate limit of this token is spent; it resets at" in p.stderr
    assert "(in 30 min)" in p.stderr or "(in 29 min)" in p.stderr


# ---- item 16: every file the user names is read with a bound -----------------------------------------------


def _cli_bounded_memory(httpserver, *args: str) -> subprocess.CompletedProcess:
    """The CLI in a child whose address space is capped at 2 GiB: an unbounded read of /dev/zero ends in a
    MemoryError there, not in the machine swapping."""
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    env.update({"PYTHONPATH": str(ROOT), "GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": REPO,
                "GITHUB_API_URL": httpserver.url_for("").rstrip("/")})

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=HANG_GUARD_S, preexec_fn=cap)


@pytest.mark.parametrize("args,flag", [
    (["gh", "comment", "--pr", "7", "--body-file", "/dev/zero"], "--body-file"),
    (["gh", "summary", "--body-file", "/dev/zero", "--out", "SUMMARY"], "--body-file"),
    (["gh", "status", "--sha", SHA, "--state", "failure", "--check-run", "--summary-file", "/dev/zero"],
     "--summary-file"),
    (["gh", "change-issues", "--history", "/dev/zero"], "--history"),
])
def test_an_endless_input_file_is_refused_with_its_flag(httpserver, tmp_path, args, flag):
    args = [str(tmp_path / "summary.md") if a == "SUMMARY" else a for a in args]
    p = _cli_bounded_memory(httpserver, *args)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr
    assert f"error: {flag} /dev/zero: more than" in p.stderr
    assert httpserver.log == [] and not (tmp_path / "summary.md").exists()


def test_an_endless_exit_code_file_sets_the_error_state(httpserver):
    httpserver.expect_request(f"/repos/{REPO}/statuses/{SHA}", method="POST",
                              json={"state": "error", "context": "trainbench",
                                    "description": "benchmark or compare failed"}).respond_with_json({"id": 1})
    p = _cli_bounded_memory(httpserver, "gh", "status", "--sha", SHA, "--exit-code-file", "/dev/zero")
    assert p.returncode == 0, p.stderr
    assert "--exit-code-file /dev/zero: more than 64 bytes, not an exit code; state error" in p.stderr
    assert "status trainbench: error" in p.stdout
    httpserver.check_assertions()
