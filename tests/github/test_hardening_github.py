"""Issue 17, GitHub client: the token never leaves the API's origin or prints, damaged artifacts are refused
cleanly, and odd HTTP answers read as what they are. Real HTTP on loopback (pytest_httpserver)."""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from support.gh_cli import run_cli
from werkzeug import Response

from suite import github
from suite.github import GitHub, GitHubError, RetryPolicy

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ghs_hard0123456789abcdefTOKEN"
REPO = "octo/bench"


class NoSleep:
    def __init__(self):
        self.sleeps: list[float] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)


@pytest.fixture
def evil():
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    yield server
    server.clear()
    if server.is_running():
        server.stop()


def _gh(httpserver: HTTPServer, sleeper: NoSleep | None = None, token: str = TOKEN) -> GitHub:
    s = sleeper or NoSleep()
    return GitHub(token=token, api_url=httpserver.url_for("").rstrip("/"),
                  retry=RetryPolicy(max_attempts=5, max_total_wait_s=120), sleep=s.sleep)


# ---- item 8: pagination links are compared by scheme, host and port ---------------------------------------


def _next_link_to(httpserver: HTTPServer, link: str) -> None:
    httpserver.expect_request(f"/repos/{REPO}/issues/7/comments").respond_with_json(
        [{"id": 1, "body": "x"}], headers={"Link": f'<{link}>; rel="next"'})


def test_a_userinfo_pagination_link_to_another_server_never_gets_the_token(httpserver, evil):
    # `http://127.0.0.1:P1@127.0.0.1:P2/...` starts with the API URL, but its host is the second server
    api = httpserver.url_for("").rstrip("/")
    evil.expect_request("/steal").respond_with_json([])
    _next_link_to(httpserver, f"{api}@127.0.0.1:{evil.port}/steal")
    with pytest.raises(GitHubError, match="refusing to send the token"):
        list(_gh(httpserver).paginate(f"/repos/{REPO}/issues/7/comments"))
    assert [req.path for req, _ in evil.log] == []


@pytest.mark.parametrize("link", [
    "https://api.github.com@evil.example/repos",
    "https://api.github.com.evil.example/repos",
    "https://api.github.com:8443/repos",
    "http://api.github.com/repos",
    "https://user:pw@api.github.com/repos",
    "https://[::1/repos",
])
def test_look_alike_origins_are_not_the_api(link):
    assert not github.same_origin(link, "https://api.github.com")


@pytest.mark.parametrize("link", ["https://api.github.com/repos?page=2", "https://API.github.com:443/x",
                                  "https://api.github.com"])
def test_the_api_itself_is_the_same_origin(link):
    assert github.same_origin(link, "https://api.github.com")


def test_a_ghes_api_path_must_stay_under_its_prefix():
    base = "https://ghe.example/api/v3"
    assert github.same_origin("https://ghe.example/api/v3/repos/x", base)
    assert not github.same_origin("https://ghe.example/api/v3evil/repos/x", base)
    assert not github.same_origin("https://ghe.example/other", base)


# ---- item 9: a token with a newline is refused and never printed, in any escaped form ----------------------


def test_a_token_with_a_newline_is_refused_up_front_without_printing_it(httpserver):
    bad = "ghs_abcdefgh\nSECRETTAIL99"
    with pytest.raises(github.AuthError, match="whitespace") as e:
        _gh(httpserver, token=bad)
    assert "SECRETTAIL99" not in str(e.value) and httpserver.log == []


def test_redaction_covers_escaped_forms():
    secret = "ghs_qq\nESCAPED_FORM77"
    github.register_secret(secret)
    for shown in (secret, repr(secret), repr(secret.encode()), '{"t": "ghs_qq\\nESCAPED_FORM77"}',
                  "ghs_qq%0AESCAPED_FORM77"):
        assert "ESCAPED_FORM77" not in github.redact(f"Invalid header value {shown}")


def _cli(httpserver, *args: str, token: str = TOKEN):
    return run_cli(args, token=token, repo=REPO, env={"GITHUB_API_URL": httpserver.url_for("").rstrip("/")})


def test_cli_with_a_newline_token_names_the_problem_and_never_prints_it(httpserver):
    p = _cli(httpserver, "gh", "status", "--sha", "a" * 40, "--state", "success",
             token="ghs_abcdefgh\nCLISECRET42")
    assert p.returncode == 1
    assert "whitespace" in p.stderr and "Traceback" not in p.stderr
    assert "CLISECRET42" not in p.stdout + p.stderr
    assert httpserver.log == []


# ---- item 12: damaged artifacts --------------------------------------------------------------------------


def _zip(entries: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _patch_headers(blob: bytes, *, flag: int | None = None, method: int | None = None,
                   crc: int | None = None) -> bytes:
    """Rewrite the fields of every local and central header (what a hostile or damaged zip carries)."""
    b = bytearray(blob)
    for sig, off_flag, off_method, off_crc in ((b"PK\x03\x04", 6, 8, 14), (b"PK\x01\x02", 8, 10, 16)):
        i = b.find(sig)
        while i != -1:
            if flag is not None:
                struct.pack_into("<H", b, i + off_flag, flag)
            if method is not None:
                struct.pack_into("<H", b, i + off_method, method)
            if crc is not None:
                struct.pack_into("<I", b, i + off_crc, crc)
            i = b.find(sig, i + 4)
    return bytes(b)


DAMAGED = {
    "bad-crc": (lambda: _patch_headers(_zip({"ok.md": b"fine\n", "report.md": b"# r\n" * 50}), crc=0xDEADBEEF),
                "damaged"),
    "encrypted": (lambda: _patch_headers(_zip({"report.md": b"# r\n"}), flag=1), "encrypted"),
    "unknown-method": (lambda: _patch_headers(_zip({"report.md": b"# r\n"}), method=99), "compression method"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_a_damaged_artifact_is_refused_and_leaves_no_file(tmp_path, case):
    make, why = DAMAGED[case]
    with pytest.raises(GitHubError, match=why):
        github.safe_extract(make(), tmp_path / "d")
    left = [p for p in (tmp_path / "d").rglob("*") if p.is_file()] if (tmp_path / "d").exists() else []
    assert left == []


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_cli_download_of_a_damaged_artifact_is_one_line_exit_1(httpserver, tmp_path, case):
    blob = DAMAGED[case][0]()
    httpserver.expect_request(f"/repos/{REPO}/actions/runs/77/artifacts").respond_with_json({"artifacts": [
        {"id": 11, "name": "bench-h200", "expired": False, "size_in_bytes": len(blob)}]})
    httpserver.expect_request(f"/repos/{REPO}/actions/artifacts/11/zip").respond_with_data(blob)
    p = _cli(httpserver, "gh", "download-artifact", "--run-id", "77", "--name", "bench-h200", "--dest",
             str(tmp_path / "arts"))
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.startswith("github: ") and DAMAGED[case][1] in p.stderr
    assert [f for f in (tmp_path / "arts").rglob("*") if f.is_file()] == []


# ---- item 20 (HTTP): a redirect reads as one, a malformed URL is not retried -------------------------------


def test_an_unexpected_302_names_the_redirect(httpserver):
    httpserver.expect_request(f"/repos/{REPO}/statuses/{'a' * 40}").respond_with_response(
        Response(status=302, headers={"Location": "https://elsewhere.example/login"}))
    with pytest.raises(GitHubError) as e:
        _gh(httpserver).commit_status(REPO, "a" * 40, "success", "ctx")
    assert "HTTP 302 ()" not in str(e.value)
    assert "redirect to https://elsewhere.example/login" in str(e.value)


def test_an_invalid_pagination_url_is_not_retried(httpserver):
    api = httpserver.url_for("").rstrip("/")
    _next_link_to(httpserver, f"{api}:notaport/repos/x/issues/7/comments?page=2")
    sleeper = NoSleep()
    with pytest.raises(GitHubError):
        list(_gh(httpserver, sleeper).paginate(f"/repos/{REPO}/issues/7/comments"))
    assert sleeper.sleeps == []
