"""GitHub's `Link: rel="next"` pagination, following only links on the API's own scheme, host and port."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from suite.github.transport import GitHubError, Transport, redact, same_origin


def paginate(gh: Transport, path: str, params: dict[str, Any] | None = None, key: str | None = None,
             max_pages: int = 50) -> Iterator[Any]:
    """Yield the items of a list endpoint page by page; a next link to another origin is refused, not followed."""
    url: str | None = path
    query: dict[str, Any] | None = {"per_page": 100, **(params or {})}
    for _ in range(max_pages):
        if url is None:
            return
        resp = gh.request("GET", url, params=query)
        query = None  # the next link carries the query
        try:
            data = resp.json()
        except ValueError:
            raise GitHubError(f"GET {path}: the body is not JSON: {redact(resp.text[:200])!r}") from None
        if key:
            if not isinstance(data, dict) or not isinstance(data.get(key), list):
                raise GitHubError(f"GET {path}: the response has no list {key!r}")
            yield from data[key]
        elif isinstance(data, list):
            yield from data
        else:
            raise GitHubError(f"GET {path}: expected a JSON list, got {type(data).__name__}")
        nxt = resp.links.get("next", {}).get("url")
        if nxt and not same_origin(nxt, gh.api_url):
            raise GitHubError(f"GET {path}: the pagination link {redact(nxt[:200])!r} is not on {gh.api_url} "
                              "(scheme, host and port must match); refusing to send the token there")
        url = nxt
