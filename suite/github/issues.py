"""Issues the nightly opens: one per change point in the history (suite/compare/history.py), updated in place."""

from __future__ import annotations

import hashlib
from typing import Any

from suite.github.client import MAX_COMMENT_CHARS, GitHub
from suite.github.transport import check_repo

ISSUE_MARKER_PREFIX = "<!-- trainbench-issue:"


def upsert_issue(gh: GitHub, repo: str, key: str, title: str, body: str,
                 labels: tuple[str, ...] = ()) -> dict[str, Any]:
    """Open the one issue carrying the hidden marker for `key`, or update it in place if it is already open.

    `key` is hashed into the marker, so that any text (a change point's id) is safe inside an HTML comment."""
    check_repo(repo)
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
