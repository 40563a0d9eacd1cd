"""A canary token pushed through every GitHub-client error path never appears in any output.

Each path is driven for real against a loopback server (or a closed port), and we look for the canary in
the exception's str and repr, the formatted traceback (with locals, and with chained exceptions), every log
record down to DEBUG (urllib3 included), what was printed, and — through the CLI — stdout and stderr.
"""

from __future__ import annotations

import io
import json
import logging
import pickle
import secrets
import time
import traceback
import zipfile
from pathlib import Path

import pytest
from support.gh_cli import run_cli
from werkzeug import Request, Response

from suite.github import GitHub, GitHubError, RetryPolicy

ROOT = Path(__file__).resolve().parents[2]
REPO = "octo/bench"
SHA = "c" * 40
CANARY = "ghp_CANARY" + secrets.token_hex(16)


def _client(url: str, **kw) -> GitHub:
    return GitHub(token=CANARY, api_url=url, retry=RetryPolicy(max_attempts=2, max_total_wait_s=5, base_s=0.01),
                  sleep=lambda s: None, **kw)


def _echo(status: int, headers: dict[str, str] | None = None, text: bool = False):
    """A hostile or buggy server that echoes the Authorization header back in its body and headers."""

    def handler(request: Request) -> Response:
        seen = request.headers.get("Authorization", "")
        assert CANARY in seen  # the token did go out, so any leak would be visible
        body = f"oops {seen}" if text else json.dumps(
            {"message": f"bad credentials for {seen}", "errors": [{"token": seen}]})
        return Response(body, status=status, headers={"X-Echo": seen, **(headers or {})},
                        content_type="text/plain" if text else "application/json")

    return handler


def _zip_bytes(name: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(name, "x")
    return buf.getvalue()


# Every error path of the client: (id, server set-up, the call that must fail)
def _paths(httpserver):
    base = httpserver.url_for("").rstrip("/")
    status = f"/repos/{REPO}/statuses/{SHA}"

    def call_status(url=base, **kw):
        return lambda: _client(url, **kw).commit_status(REPO, SHA, "success", "ctx")

    def setup(path, handler, method="POST"):
        return lambda: httpserver.expect_request(path, method=method).respond_with_handler(handler)

    def slow(request: Request) -> Response:
        time.sleep(0.5)
        return Response("{}", status=201)

    def redirect_to_failing_blob():
        httpserver.expect_request(f"/repos/{REPO}/actions/artifacts/5/zip").respond_with_response(
            Response(status=302, headers={"Location": httpserver.url_for("/blob?sig=presigned")}))
        # the pre-signed blob host gets no token at all (test_github checks that); it fails, echoing its URL
        httpserver.expect_request("/blob").respond_with_handler(
            lambda r: Response(f"denied {r.url}", status=500))

    def zip_slip():
        httpserver.expect_request(f"/repos/{REPO}/actions/artifacts/5/zip").respond_with_data(
            _zip_bytes("../../escape"))

    def download():
        return _client(base).download_artifact(REPO, {"id": 5, "name": "bench"}, Path("/tmp") / secrets.token_hex(4))

    return [
        ("401", setup(status, _echo(401)), call_status()),
        ("403-permission", setup(status, _echo(403)), call_status()),
        ("403-secondary-exhausted", setup(status, _echo(403, {"Retry-After": "1"})), call_status()),
        ("404", setup(status, _echo(404)), call_status()),
        ("422", setup(status, _echo(422)), call_status()),
        ("500-exhausted", setup(status, _echo(500)), call_status()),
        ("429-over-budget", setup(status, _echo(429, {"Retry-After": "999"})), call_status()),
        ("ratelimit-reset", setup(status, _echo(403, {"X-RateLimit-Remaining": "0",
                                                      "X-RateLimit-Reset": "0"})), call_status()),
        ("non-json-200", setup(status, _echo(201, text=True)), call_status()),
        ("non-json-error", setup(status, _echo(502, text=True)), call_status()),
        ("timeout", setup(status, slow), call_status(timeout_s=0.1)),
        ("connection-refused", lambda: None, call_status("http://127.0.0.1:1")),
        ("unresolvable-host", lambda: None, call_status("http://api.nonexistent.invalid")),
        ("blob-500", redirect_to_failing_blob, download),
        ("zip-slip", zip_slip, download),
        ("registration-no-token", setup(f"/repos/{REPO}/actions/runners/registration-token",
                                        lambda r: Response('{"nope": 1}', status=201)),
         lambda: _client(base).runner_registration_token(repo=REPO)),
        ("comments-non-json", setup(f"/repos/{REPO}/issues/1/comments", _echo(200, text=True), "GET"),
         lambda: _client(base).sticky_comment(REPO, 1, "x")),
    ]


PATH_IDS = ["401", "403-permission", "403-secondary-exhausted", "404", "422", "500-exhausted", "429-over-budget",
            "ratelimit-reset", "non-json-200", "non-json-error", "timeout", "connection-refused", "unresolvable-host",
            "blob-500", "zip-slip", "registration-no-token", "comments-non-json"]


def test_every_error_path_is_listed(httpserver):
    assert [p[0] for p in _paths(httpserver)] == PATH_IDS


@pytest.mark.parametrize("path_id", PATH_IDS)
def test_canary_never_appears(httpserver, caplog, capsys, path_id):
    _, setup, call = next(p for p in _paths(httpserver) if p[0] == path_id)
    setup()
    caplog.set_level(logging.DEBUG)
    with pytest.raises(GitHubError) as info:
        call()
    exc = info.value
    texts = [
        str(exc), repr(exc),
        "".join(traceback.format_exception(exc)),
        "".join(traceback.TracebackException.from_exception(exc, capture_locals=True).format()),
        caplog.text, "\n".join(r.getMessage() for r in caplog.records),
    ]
    cause = exc.__cause__ or exc.__context__
    while cause is not None:  # a chained exception would print too
        texts += [str(cause), repr(cause)]
        cause = cause.__cause__ or cause.__context__
    out = capsys.readouterr()
    texts += [out.out, out.err]
    leaked = [t for t in texts if CANARY in t]
    assert not leaked, f"{path_id}: the token leaked: {leaked[0][:500]}"
    assert str(exc)  # and there is a message to read


def test_client_and_auth_reprs_and_pickling_hide_the_token():
    gh = GitHub(token=CANARY, api_url="http://127.0.0.1:1")
    for obj in (gh, gh._auth, vars(gh)):
        assert CANARY not in repr(obj) and CANARY not in str(obj)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(gh._auth)


def _cli(args, env_extra):
    return run_cli(args, token=CANARY, repo=REPO, env=env_extra)


def test_cli_error_paths_never_print_the_token(httpserver, tmp_path):
    (tmp_path / "r.md").write_text("x")
    httpserver.expect_request(f"/repos/{REPO}/statuses/{SHA}").respond_with_handler(_echo(401))
    httpserver.expect_request(f"/repos/{REPO}/issues/4/comments").respond_with_handler(_echo(422))
    httpserver.expect_request(f"/repos/{REPO}/actions/runners/registration-token").respond_with_handler(_echo(403))
    api = {"GITHUB_API_URL": httpserver.url_for("").rstrip("/")}
    runs = [
        _cli(["gh", "status", "--sha", SHA, "--state", "success"], api),
        _cli(["gh", "comment", "--pr", "4", "--body-file", str(tmp_path / "r.md")], api),
        _cli(["runner", "register", "--labels", "gpu"], api),
        _cli(["gh", "status", "--sha", SHA, "--state", "success"], {"GITHUB_API_URL": "http://127.0.0.1:1"}),
    ]
    for p in runs:
        assert p.returncode == 1, p.stderr
        assert "***" in p.stderr or "cannot reach" in p.stderr
        assert CANARY not in p.stdout + p.stderr
        assert "Traceback" not in p.stderr
