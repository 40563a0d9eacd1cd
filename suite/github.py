"""GitHub REST client over requests: sticky PR comments, commit statuses and check runs, job summaries,
workflow artifacts and runner registration tokens, with bounded retries and a token that never leaks.

The token lives only inside `_TokenAuth` (whose repr is redacted) and is applied to each request as it is
sent; every error message passes through `redact()` and is raised `from None`, so neither a traceback, a log
line nor a server that echoes the token back can print it.
"""

from __future__ import annotations

import io
import json
import logging
import os
import random
import re
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path, PurePosixPath
from typing import Any

import requests

log = logging.getLogger(__name__)

API_VERSION = "2022-11-28"
ACCEPT = "application/vnd.github+json"
DEFAULT_API_URL = "https://api.github.com"
MARKER_PREFIX = "<!-- trainbench:"
MAX_COMMENT_CHARS = 65_536  # GitHub rejects longer issue comment bodies (422)
MAX_SUMMARY_BYTES = 1024 * 1024  # GitHub's limit for one step's $GITHUB_STEP_SUMMARY
MAX_STATUS_DESCRIPTION = 140
STATES = ("success", "failure", "error", "pending")
# compare's exit codes (0 ok, 1 regression, 2 error) -> commit status state
STATE_OF_EXIT = {0: "success", 1: "failure", 2: "error"}
REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
SHA_RE = re.compile(r"^[0-9a-f]{40}$")


class GitHubError(RuntimeError):
    """A GitHub API call failed; the message says which call, why, and what to do. Never holds the token."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class AuthError(GitHubError):
    """401 / 403 (not a rate limit) / missing token."""


class NotFound(GitHubError):
    """404: the repository, pull request, run or artifact does not exist, or the token cannot see it."""


class RateLimited(GitHubError):
    """Still rate limited after the retry budget."""


# ---- the secret --------------------------------------------------------------------------------------


_SECRETS: set[str] = set()


def redact(text: str) -> str:
    """Replace every known secret (tokens this process was given) with ***."""
    for s in sorted(_SECRETS, key=len, reverse=True):
        if s:
            text = text.replace(s, "***")
    return text


def register_secret(value: str) -> None:
    if len(value) >= 4:  # a one-letter "secret" would redact every such letter
        _SECRETS.add(value)


class _TokenAuth(requests.auth.AuthBase):
    """Adds the Authorization header when a request is sent; its repr and str never show the token."""

    def __init__(self, token: str):
        register_secret(token)
        self._token = token

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        r.headers["Authorization"] = f"Bearer {self._token}"
        return r

    def __repr__(self) -> str:
        return "_TokenAuth(***)"

    __str__ = __repr__

    def __reduce__(self):  # never pickled into a worker or a log
        raise TypeError("the GitHub token cannot be pickled")


def token_from_env(env: dict[str, str] | None = None) -> str:
    env = dict(os.environ) if env is None else env
    token = env.get("GITHUB_TOKEN") or env.get("GH_TOKEN") or ""
    if not token.strip():
        raise AuthError(
            "no GitHub token: set GITHUB_TOKEN (in a workflow: `env: GITHUB_TOKEN: ${{ github.token }}`, "
            "with the job's `permissions:` granting what the command needs)"
        )
    return token.strip()


# ---- retry policy ------------------------------------------------------------------------------------


@dataclass
class RetryPolicy:
    """Bounded in attempts and in total waiting; backoff doubles from `base_s` with jitter, capped."""

    max_attempts: int = 5
    max_total_wait_s: float = 300.0
    base_s: float = 1.0
    cap_s: float = 60.0
    secondary_default_s: float = 60.0  # GitHub: "wait for at least one minute" when no header says how long

    def backoff(self, attempt: int) -> float:
        return min(self.cap_s, self.base_s * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)


def _retry_after_s(resp: requests.Response, now: float) -> float | None:
    """How long the server asked us to wait: Retry-After (seconds or HTTP date), else X-RateLimit-Reset."""
    ra = resp.headers.get("Retry-After")
    if ra:
        try:
            return max(0.0, float(ra))
        except ValueError:
            try:
                return max(0.0, parsedate_to_datetime(ra).timestamp() - now)
            except (TypeError, ValueError):
                pass
    if resp.headers.get("X-RateLimit-Remaining") == "0" and resp.headers.get("X-RateLimit-Reset"):
        try:
            return max(0.0, float(resp.headers["X-RateLimit-Reset"]) - now) + 1.0
        except ValueError:
            return None
    return None


def _api_message(resp: requests.Response) -> str:
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:300].strip()
    if isinstance(data, dict):
        msg = str(data.get("message", ""))
        errors = data.get("errors")
        if errors:
            msg += f" ({json.dumps(errors)[:300]})"
        return msg
    return str(data)[:300]


def _is_rate_limited(resp: requests.Response) -> bool:
    if resp.status_code == 429:
        return True
    if resp.status_code != 403:
        return False
    if resp.headers.get("Retry-After") or resp.headers.get("X-RateLimit-Remaining") == "0":
        return True
    return "rate limit" in _api_message(resp).lower()


# ---- the client --------------------------------------------------------------------------------------


class GitHub:
    """A small GitHub REST client. `api_url` defaults to $GITHUB_API_URL (GitHub Enterprise) or api.github.com."""

    def __init__(
        self,
        token: str | None = None,
        api_url: str | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ):
        self._auth = _TokenAuth(token if token is not None else token_from_env())
        self.api_url = (api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s
        self._sleep, self._clock = sleep, clock
        self._session = requests.Session()
        self._session.headers.update({
            "Accept": ACCEPT, "X-GitHub-Api-Version": API_VERSION, "User-Agent": "trainbench",
        })

    def __repr__(self) -> str:
        return f"GitHub(api_url={self.api_url!r}, token=***)"

    # ---- transport -------------------------------------------------------------------------------------

    def request(self, method: str, path: str, *, json_body: Any = None, params: dict[str, Any] | None = None,
                ok: tuple[int, ...] = (200, 201), allow_redirect: bool = False) -> requests.Response:
        """One API call with retries on 5xx, 429 and rate-limit 403s; raises GitHubError on anything else."""
        url = path if path.startswith("http") else f"{self.api_url}{path}"
        what = f"{method} {path.split('?')[0]}"
        waited = 0.0
        for attempt in range(1, self.retry.max_attempts + 1):
            reason = None
            try:
                resp = self._session.request(
                    method, url, json=json_body, params=params, auth=self._auth, timeout=self.timeout_s,
                    allow_redirects=False,
                )
            except requests.RequestException as e:
                reason = f"{type(e).__name__}: {redact(str(e))}"
            if reason is not None:
                # handled outside the except block, so the error raised below has no __context__ holding
                # requests' internals (prepared request, headers) for a traceback walker to print
                wait = self.retry.backoff(attempt)
                if attempt == self.retry.max_attempts or waited + wait > self.retry.max_total_wait_s:
                    raise GitHubError(f"{what}: cannot reach {self.api_url} after {attempt} attempt(s): "
                                      f"{reason}")
                log.warning("%s: %s; retrying in %.1f s", what, reason, wait)
                self._sleep(wait)
                waited += wait
                continue
            if resp.status_code in ok or (allow_redirect and resp.status_code in (301, 302, 303, 307, 308)):
                return resp
            retryable = resp.status_code >= 500 or _is_rate_limited(resp)
            if not retryable:
                raise self._error(what, resp)
            asked = _retry_after_s(resp, self._clock())
            if asked is None:
                asked = (self.retry.secondary_default_s if resp.status_code == 403
                         else self.retry.backoff(attempt))
            out_of_budget = waited + asked > self.retry.max_total_wait_s
            if attempt == self.retry.max_attempts or out_of_budget:
                err = self._error(what, resp)
                why = (f"the server asks to wait {asked:.0f} s, past the retry budget of "
                       f"{self.retry.max_total_wait_s:.0f} s" if out_of_budget else f"{attempt} attempts")
                cls = RateLimited if _is_rate_limited(resp) else GitHubError
                raise cls(f"{err} (gave up after {why})", resp.status_code) from None
            log.warning("%s: HTTP %d; retrying in %.1f s (attempt %d of %d)", what, resp.status_code, asked,
                        attempt, self.retry.max_attempts)
            self._sleep(asked)
            waited += asked
        raise AssertionError("unreachable")  # pragma: no cover

    def _error(self, what: str, resp: requests.Response) -> GitHubError:
        code = resp.status_code
        msg = redact(_api_message(resp))
        if code == 401:
            return AuthError(f"{what}: 401 unauthorized ({msg}): GITHUB_TOKEN is missing, expired or revoked",
                             code)
        if code == 403:
            return AuthError(f"{what}: 403 forbidden ({msg}): the token lacks a permission; grant it in the "
                             "job's `permissions:` (statuses: write, pull-requests: write, actions: read, ...) "
                             "or use a token with the right scope", code)
        if code == 404:
            return NotFound(f"{what}: 404 not found ({msg}): check the repository, number or id, and that the "
                            "token can see the repository", code)
        return GitHubError(f"{what}: HTTP {code} ({msg})", code)

    def json(self, method: str, path: str, **kw: Any) -> Any:
        resp = self.request(method, path, **kw)
        try:
            return resp.json()
        except ValueError:
            raise GitHubError(f"{method} {path}: HTTP {resp.status_code} but the body is not JSON: "
                              f"{redact(resp.text[:200])!r}") from None

    def paginate(self, path: str, params: dict[str, Any] | None = None, key: str | None = None,
                 max_pages: int = 50) -> Iterator[Any]:
        """Follow `Link: rel="next"` (GitHub's pagination) for list endpoints."""
        url: str | None = path
        query: dict[str, Any] | None = {"per_page": 100, **(params or {})}
        for _ in range(max_pages):
            if url is None:
                return
            resp = self.request("GET", url, params=query)
            query = None  # the next link carries the query
            try:
                data = resp.json()
            except ValueError:
                raise GitHubError(f"GET {path}: the body is not JSON: {redact(resp.text[:200])!r}") from None
            yield from (data[key] if key else data)
            nxt = resp.links.get("next", {}).get("url")
            if nxt and not nxt.startswith(self.api_url):
                raise GitHubError(f"GET {path}: pagination link points outside {self.api_url}; refusing")
            url = nxt

    # ---- pull requests and comments --------------------------------------------------------------------

    def find_pull_request(self, repo: str, head_sha: str, head_label: str | None = None) -> int:
        """The open PR whose head is `head_sha` (a workflow_run event gives no PR number for forks)."""
        _check_repo(repo)
        _check_sha(head_sha)
        pulls = list(self.json("GET", f"/repos/{repo}/commits/{head_sha}/pulls"))
        if not pulls and head_label:
            pulls = list(self.paginate(f"/repos/{repo}/pulls", {"state": "open", "head": head_label}))
        matching = [p for p in pulls if p.get("head", {}).get("sha") == head_sha and p.get("state") == "open"]
        if not matching:
            raise NotFound(f"no open pull request in {repo} has head {head_sha}")
        return int(matching[0]["number"])

    def sticky_comment(self, repo: str, pr: int, body: str, key: str = "bench",
                       author: str | None = None) -> dict[str, Any]:
        """Create or update in place the one comment carrying the hidden marker for `key`."""
        _check_repo(repo)
        marker = f"{MARKER_PREFIX}{key} -->"
        full = f"{marker}\n{body}"
        if len(full) > MAX_COMMENT_CHARS:
            note = "\n\n…(truncated: the full report is in the workflow run's artifacts)"
            full = full[: MAX_COMMENT_CHARS - len(note)] + note
        for c in self.paginate(f"/repos/{repo}/issues/{int(pr)}/comments"):
            login = (c.get("user") or {}).get("login")
            if str(c.get("body", "")).startswith(marker) and (author is None or login == author):
                data = self.json("PATCH", f"/repos/{repo}/issues/comments/{int(c['id'])}",
                                 json_body={"body": full})
                return {"action": "updated", "id": data["id"], "url": data.get("html_url")}
        data = self.json("POST", f"/repos/{repo}/issues/{int(pr)}/comments", json_body={"body": full})
        return {"action": "created", "id": data["id"], "url": data.get("html_url")}

    # ---- statuses and checks ---------------------------------------------------------------------------

    def commit_status(self, repo: str, sha: str, state: str, context: str, description: str = "",
                      target_url: str | None = None) -> dict[str, Any]:
        _check_repo(repo)
        _check_sha(sha)
        if state not in STATES:
            raise ValueError(f"state {state!r}: expected one of {', '.join(STATES)}")
        body: dict[str, Any] = {"state": state, "context": context,
                                "description": description[:MAX_STATUS_DESCRIPTION]}
        if target_url:
            body["target_url"] = target_url
        return self.json("POST", f"/repos/{repo}/statuses/{sha}", json_body=body)

    def check_run(self, repo: str, sha: str, name: str, conclusion: str, title: str, summary: str,
                  details_url: str | None = None) -> dict[str, Any]:
        """A completed check run (needs `checks: write`); the summary is markdown, cut to GitHub's 65,535."""
        _check_repo(repo)
        _check_sha(sha)
        body: dict[str, Any] = {
            "name": name, "head_sha": sha, "status": "completed", "conclusion": conclusion,
            "output": {"title": title[:255], "summary": summary[:65_535]},
        }
        if details_url:
            body["details_url"] = details_url
        return self.json("POST", f"/repos/{repo}/check-runs", json_body=body)

    # ---- artifacts -------------------------------------------------------------------------------------

    def list_artifacts(self, repo: str, run_id: int) -> list[dict[str, Any]]:
        _check_repo(repo)
        return list(self.paginate(f"/repos/{repo}/actions/runs/{int(run_id)}/artifacts", key="artifacts"))

    def download_artifact(self, repo: str, artifact: dict[str, Any], dest: Path,
                          max_bytes: int = 512 * 1024 * 1024) -> list[Path]:
        """Download one artifact's zip and extract it under dest/, treating every entry as untrusted."""
        _check_repo(repo)
        if artifact.get("expired"):
            raise GitHubError(f"artifact {artifact.get('name')!r} has expired; re-run the benchmark workflow")
        if int(artifact.get("size_in_bytes") or 0) > max_bytes:
            raise GitHubError(f"artifact {artifact.get('name')!r} is {artifact['size_in_bytes']} bytes, over the "
                              f"limit of {max_bytes}")
        resp = self.request("GET", f"/repos/{repo}/actions/artifacts/{int(artifact['id'])}/zip",
                            allow_redirect=True)
        if resp.is_redirect or resp.status_code in (301, 302, 303, 307, 308):
            # the blob store URL is pre-signed: it must not receive our token
            location = resp.headers.get("Location", "")
            failure = None
            try:
                blob = requests.get(location, timeout=self.timeout_s, stream=True, allow_redirects=True)
                blob.raise_for_status()
                content = _read_capped(blob, max_bytes)
            except requests.RequestException as e:
                failure = f"{type(e).__name__}: {redact(str(e))}"
            if failure is not None:
                raise GitHubError(f"artifact {artifact.get('name')!r}: download failed: {failure}")
        else:
            content = resp.content
        return safe_extract(content, dest, max_bytes)

    # ---- runners ---------------------------------------------------------------------------------------

    def runner_registration_token(self, repo: str | None = None, org: str | None = None) -> dict[str, Any]:
        """A one-hour token for `config.sh` (needs a token with repo admin or org self-hosted-runner rights)."""
        if (repo is None) == (org is None):
            raise ValueError("give exactly one of repo or org")
        if repo is not None:
            _check_repo(repo)
            path = f"/repos/{repo}/actions/runners/registration-token"
        else:
            if not re.fullmatch(r"[A-Za-z0-9-]+", org or ""):
                raise ValueError(f"org {org!r}: not an organisation name")
            path = f"/orgs/{org}/actions/runners/registration-token"
        data = self.json("POST", path, ok=(201, 200))
        if "token" not in data:
            raise GitHubError(f"POST {path}: the response has no token")
        register_secret(str(data["token"]))
        return data


# ---- helpers -----------------------------------------------------------------------------------------


def _check_repo(repo: str) -> None:
    if not REPO_RE.fullmatch(repo or "") or ".." in repo:
        raise ValueError(f"repository {repo!r}: expected OWNER/NAME (e.g. from $GITHUB_REPOSITORY)")


def _check_sha(sha: str) -> None:
    if not SHA_RE.fullmatch(sha or ""):
        raise ValueError(f"commit {sha!r}: expected a full 40-character hex SHA")


def _read_capped(resp: requests.Response, max_bytes: int) -> bytes:
    buf = io.BytesIO()
    for chunk in resp.iter_content(1 << 16):
        buf.write(chunk)
        if buf.tell() > max_bytes:
            raise GitHubError(f"artifact download is over the limit of {max_bytes} bytes; refusing")
    return buf.getvalue()


def safe_extract(content: bytes, dest: Path, max_bytes: int = 512 * 1024 * 1024,
                 max_files: int = 10_000) -> list[Path]:
    """Extract a zip from an untrusted source: no absolute paths, no `..`, no links, bounded size and count."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(content))
    except zipfile.BadZipFile:
        raise GitHubError("the artifact is not a valid zip file") from None
    infos = zf.infolist()
    if len(infos) > max_files:
        raise GitHubError(f"the artifact has {len(infos)} entries, over the limit of {max_files}")
    if sum(i.file_size for i in infos) > max_bytes:
        raise GitHubError(f"the artifact unpacks to more than {max_bytes} bytes; refusing (zip bomb?)")
    dest = dest.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for info in infos:
        name = PurePosixPath(info.filename.replace("\\", "/"))
        mode = (info.external_attr >> 16) & 0o170000
        if name.is_absolute() or ".." in name.parts or mode == 0o120000:
            raise GitHubError(f"the artifact entry {info.filename!r} is a link or escapes the folder; refusing")
        if info.is_dir():
            continue
        target = (dest / Path(*name.parts)).resolve()
        if dest not in target.parents:
            raise GitHubError(f"the artifact entry {info.filename!r} escapes the folder; refusing")
        target.parent.mkdir(parents=True, exist_ok=True)
        with zf.open(info) as src, open(target, "wb") as out:
            out.write(src.read(info.file_size + 1)[: info.file_size])
        written.append(target)
    return written


def write_step_summary(markdown: str, path: str | Path | None = None) -> Path:
    """Append markdown to $GITHUB_STEP_SUMMARY (GitHub keeps at most 1 MiB per step)."""
    target = path or os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        raise ValueError("$GITHUB_STEP_SUMMARY is not set (not in a GitHub Actions step?); pass --out FILE")
    data = markdown.encode("utf-8")
    if len(data) > MAX_SUMMARY_BYTES:
        note = "\n\n…(truncated: the full report is in the run's artifacts)\n".encode()
        data = data[: MAX_SUMMARY_BYTES - len(note)].decode("utf-8", "ignore").encode() + note
    p = Path(target)
    with open(p, "ab") as f:
        f.write(data if data.endswith(b"\n") else data + b"\n")
    return p


def state_from_exit_code(text: str) -> str:
    """compare's exit code, read from an (untrusted) artifact file, -> a status state; anything odd is error."""
    try:
        code = int(text.strip())
    except ValueError:
        return "error"
    return STATE_OF_EXIT.get(code, "error")


def runner_config_command(url: str, token: str, labels: list[str], name: str | None = None,
                          ephemeral: bool = True, work_dir: str = "_work") -> list[str]:
    """The actions-runner `config.sh` command line for these labels."""
    for label in labels:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", label):
            raise ValueError(f"label {label!r}: use letters, digits, '.', '_' or '-'")
    cmd = ["./config.sh", "--unattended", "--url", url, "--token", token, "--labels", ",".join(labels),
           "--work", work_dir, "--replace"]
    if name:
        cmd += ["--name", name]
    if ephemeral:
        cmd.append("--ephemeral")
    return cmd


# ---- issues: one per change point in the nightly history (suite/history.py) -------------------------------------

ISSUE_MARKER_PREFIX = "<!-- trainbench-issue:"


def upsert_issue(gh: GitHub, repo: str, key: str, title: str, body: str,
                 labels: tuple[str, ...] = ()) -> dict[str, Any]:
    """Open the one issue carrying the hidden marker for `key`, or update it in place if it is already open.

    `key` is hashed into the marker, so that any text (a change point's id) is safe inside an HTML comment."""
    import hashlib

    _check_repo(repo)
    marker = f"{ISSUE_MARKER_PREFIX}{hashlib.sha256(key.encode()).hexdigest()[:20]} -->"
    full = f"{marker}\n{body}"[:MAX_COMMENT_CHARS]
    params: dict[str, Any] = {"state": "open", **({"labels": ",".join(labels)} if labels else {})}
    for issue in gh.paginate(f"/repos/{repo}/issues", params):
        if "pull_request" not in issue and str(issue.get("body") or "").startswith(marker):
            data = gh.json("PATCH", f"/repos/{repo}/issues/{int(issue['number'])}",
                           json_body={"title": title, "body": full})
            return {"action": "updated", "number": data["number"], "url": data.get("html_url")}
    data = gh.json("POST", f"/repos/{repo}/issues", json_body={"title": title, "body": full, "labels": list(labels)})
    return {"action": "created", "number": data["number"], "url": data.get("html_url")}
