"""The GitHub client's transport: the token (never leaked), errors, the retry policy and one API call.

The token lives only inside `_TokenAuth` (whose repr is redacted) and is applied to each request as it is
sent; every error message passes through `redact()` and is raised `from None`, so neither a traceback, a log
line nor a server that echoes the token back can print it, in any escaped form.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import requests

from suite.github import deadline

log = logging.getLogger("suite.github")

API_VERSION = "2022-11-28"
ACCEPT = "application/vnd.github+json"
DEFAULT_API_URL = "https://api.github.com"
REDIRECTS = (301, 302, 303, 307, 308)
# a malformed URL or header is our bug or bad input: retrying it five times only delays the message
NOT_RETRYABLE = (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
                 requests.exceptions.InvalidSchema, requests.exceptions.InvalidHeader,
                 requests.exceptions.URLRequired)


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


def _forms(secret: str) -> set[str]:
    """Every way a message may spell the secret: raw, repr/bytes-repr escaped, JSON escaped, URL quoted."""
    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1], urllib.parse.quote(secret, safe=""),
             urllib.parse.quote_plus(secret)}
    try:
        forms.add(repr(secret.encode("latin-1"))[2:-1])
    except UnicodeEncodeError:
        forms.add(repr(secret.encode("utf-8"))[2:-1])
    return {f for f in forms if f}


def redact(text: str) -> str:
    """Replace every known secret (tokens this process was given), in every escaped form, with ***."""
    forms = {f for s in _SECRETS for f in _forms(s)}
    for s in sorted(forms, key=len, reverse=True):
        text = text.replace(s, "***")
    return text


def register_secret(value: str) -> None:
    if len(value) >= 4:  # a one-letter "secret" would redact every such letter
        _SECRETS.add(value)


def check_token(token: str) -> str:
    """Refuse a token with whitespace or control characters before it reaches a header (and an error)."""
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in token):
        register_secret(token)
        raise AuthError("the GitHub token contains whitespace or a control character (a pasted newline?): "
                        "set GITHUB_TOKEN to the token alone")
    return token


class _TokenAuth(requests.auth.AuthBase):
    """Adds the Authorization header when a request is sent; its repr and str never show the token."""

    def __init__(self, token: str):
        register_secret(token)
        self._token = check_token(token)

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


def _reset_note(resp: requests.Response, now: float) -> str:
    """When the limit resets, from X-RateLimit-Reset (epoch seconds), in UTC and from now."""
    try:
        reset = float(resp.headers.get("X-RateLimit-Reset", ""))
        when = datetime.fromtimestamp(reset, UTC)
    except (ValueError, OverflowError, OSError):
        return ""
    return f"; it resets at {when:%Y-%m-%d %H:%M:%S} UTC (in {max(0.0, reset - now) / 60:.0f} min)"


def _is_rate_limited(resp: requests.Response) -> bool:
    if resp.status_code == 429:
        return True
    if resp.status_code != 403:
        return False
    if resp.headers.get("Retry-After") or resp.headers.get("X-RateLimit-Remaining") == "0":
        return True
    return "rate limit" in _api_message(resp).lower()


def same_origin(url: str, base: str) -> bool:
    """True when `url` has `base`'s scheme, host and port, no user info, and a path under base's path.

    A prefix test is not enough: `https://api.github.com@evil.example/` and `https://api.github.com.evil.example/`
    both start with `https://api.github.com` and send the token elsewhere.
    """
    try:
        u, b = urllib.parse.urlsplit(url), urllib.parse.urlsplit(base)
        u_port, b_port = u.port, b.port
    except ValueError:
        return False
    defaults = {"https": 443, "http": 80}
    if u.scheme.lower() != b.scheme.lower() or u.username is not None or u.password is not None:
        return False
    if (u.hostname or "").lower() != (b.hostname or "").lower() or not u.hostname:
        return False
    if (u_port or defaults.get(u.scheme.lower())) != (b_port or defaults.get(b.scheme.lower())):
        return False
    base_path = b.path.rstrip("/")
    return u.path == base_path or u.path.startswith(base_path + "/") or not base_path


class Transport:
    """One API call with bounded retries; the token goes only to `api_url`'s own scheme, host and port."""

    def __init__(
        self,
        token: str | None = None,
        api_url: str | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 30.0,
        deadline_s: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ):
        self._auth = _TokenAuth(token if token is not None else token_from_env())
        self.api_url = (api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s  # per socket read (requests' timeout)
        self.deadline_s = deadline_s  # per attempt, the whole exchange: a server trickling bytes is cut here
        self._sleep, self._clock = sleep, clock
        self._session = deadline.session()
        self._session.headers.update({
            "Accept": ACCEPT, "X-GitHub-Api-Version": API_VERSION, "User-Agent": "trainbench",
        })

    def __repr__(self) -> str:
        return f"GitHub(api_url={self.api_url!r}, token=***)"

    def request(self, method: str, path: str, *, json_body: Any = None, params: dict[str, Any] | None = None,
                ok: tuple[int, ...] = (200, 201), allow_redirect: bool = False) -> requests.Response:
        """One API call with retries on 5xx, 429 and rate-limit 403s; raises GitHubError on anything else."""
        url = path if "://" in path else f"{self.api_url}{path}"
        what = f"{method} {redact(path.split('?')[0])}"
        if not same_origin(url, self.api_url):
            raise GitHubError(f"{what}: the URL is not on {self.api_url} (scheme, host and port must match); "
                              "refusing to send the token there")
        waited = 0.0
        for attempt in range(1, self.retry.max_attempts + 1):
            reason, retry_it = None, True
            with deadline.limit(self.deadline_s) as limit:
                try:
                    resp = self._session.request(
                        method, url, json=json_body, params=params, auth=self._auth, timeout=self.timeout_s,
                        allow_redirects=False,
                    )
                except requests.RequestException as e:
                    reason = f"{type(e).__name__}: {redact(str(e))}"
                    retry_it = not isinstance(e, NOT_RETRYABLE)
            if limit.expired:  # whatever came back (an error, or a body cut short) is not the answer
                self._session.close()  # its connections were shut down: none is reused
                raise GitHubError(f"{what}: no complete answer from {self.api_url} within the "
                                  f"{self.deadline_s:.0f} s deadline (the server sends too slowly); not retried")
            if reason is not None:
                # handled outside the except block, so the error raised below has no __context__ holding
                # requests' internals (prepared request, headers) for a traceback walker to print
                if not retry_it:
                    raise GitHubError(f"{what}: invalid request (not retried): {reason}")
                wait = self.retry.backoff(attempt)
                if attempt == self.retry.max_attempts or waited + wait > self.retry.max_total_wait_s:
                    raise GitHubError(f"{what}: cannot reach {self.api_url} after {attempt} attempt(s): "
                                      f"{reason}")
                log.warning("%s: %s; retrying in %.1f s", what, reason, wait)
                self._sleep(wait)
                waited += wait
                continue
            if resp.status_code in ok or (allow_redirect and resp.status_code in REDIRECTS):
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
        msg = redact(_api_message(resp)) or "no message"
        if code == 401:
            return AuthError(f"{what}: 401 unauthorized ({msg}): GITHUB_TOKEN is missing, expired or revoked",
                             code)
        if _is_rate_limited(resp):  # a spent rate limit is not a missing permission (both can be a 403)
            return RateLimited(f"{what}: HTTP {code} rate limited ({msg}): the API rate limit of this token is "
                               f"spent{_reset_note(resp, self._clock())}; wait for the reset, or spread the calls",
                               code)
        if code == 403:
            return AuthError(f"{what}: 403 forbidden ({msg}): the token lacks a permission; grant it in the "
                             "job's `permissions:` (statuses: write, pull-requests: write, actions: read, ...) "
                             "or use a token with the right scope", code)
        if code == 404:
            return NotFound(f"{what}: 404 not found ({msg}): check the repository, number or id, and that the "
                            "token can see the repository", code)
        if code in REDIRECTS:
            where = redact(resp.headers.get("Location", "")[:200]) or "no Location header"
            return GitHubError(f"{what}: HTTP {code} redirect to {where}, not followed (the token is sent only to "
                               f"{self.api_url}): check GITHUB_API_URL points at the API itself", code)
        return GitHubError(f"{what}: HTTP {code} ({msg})", code)

    def json(self, method: str, path: str, **kw: Any) -> Any:
        resp = self.request(method, path, **kw)
        try:
            return resp.json()
        except ValueError:
            raise GitHubError(f"{method} {path}: HTTP {resp.status_code} but the body is not JSON: "
                              f"{redact(resp.text[:200])!r}") from None


REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
SHA_RE = re.compile(r"^[0-9a-f]{40}$")


def check_repo(repo: str) -> None:
    if not REPO_RE.fullmatch(repo or "") or ".." in repo:
        raise ValueError(f"repository {repo!r}: expected OWNER/NAME (e.g. from $GITHUB_REPOSITORY)")


def check_sha(sha: str) -> None:
    if not SHA_RE.fullmatch(sha or ""):
        raise ValueError(f"commit {sha!r}: expected a full 40-character hex SHA")
