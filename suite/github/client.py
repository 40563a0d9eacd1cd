"""The GitHub client the CLI uses: pull requests, sticky comments, statuses, check runs, job summaries,
plus the artifact and runner calls (in their own modules), on one `Transport`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from suite.github import artifacts, runners, workflows
from suite.github.pagination import paginate
from suite.github.transport import NotFound, Transport, check_repo, check_sha

MARKER_PREFIX = "<!-- trainbench:"
MAX_COMMENT_CHARS = 65_536  # GitHub rejects longer issue comment bodies (422)
MAX_SUMMARY_BYTES = 1024 * 1024  # GitHub's limit for one step's $GITHUB_STEP_SUMMARY
MAX_STATUS_DESCRIPTION = 140
STATES = ("success", "failure", "error", "pending")
# compare's exit codes (0 ok, 1 regression, 2 error) -> commit status state
STATE_OF_EXIT = {0: "success", 1: "failure", 2: "error"}


class GitHub(Transport):
    """A small GitHub REST client. `api_url` defaults to $GITHUB_API_URL (GitHub Enterprise) or api.github.com."""

    def paginate(self, path: str, params: dict[str, Any] | None = None, key: str | None = None,
                 max_pages: int = 50) -> Iterator[Any]:
        return paginate(self, path, params, key, max_pages)

    # ---- pull requests and comments --------------------------------------------------------------------

    def find_pull_request(self, repo: str, head_sha: str, head_label: str | None = None) -> int:
        """The open PR whose head is `head_sha` (a workflow_run event gives no PR number for forks)."""
        check_repo(repo)
        check_sha(head_sha)
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
        check_repo(repo)
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
        check_repo(repo)
        check_sha(sha)
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
        check_repo(repo)
        check_sha(sha)
        body: dict[str, Any] = {
            "name": name, "head_sha": sha, "status": "completed", "conclusion": conclusion,
            "output": {"title": title[:255], "summary": summary[:65_535]},
        }
        if details_url:
            body["details_url"] = details_url
        return self.json("POST", f"/repos/{repo}/check-runs", json_body=body)

    # ---- artifacts and runners (their own modules) -------------------------------------------------------

    def list_artifacts(self, repo: str, run_id: int) -> list[dict[str, Any]]:
        return artifacts.list_artifacts(self, repo, run_id)

    def download_artifact(self, repo: str, artifact: dict[str, Any], dest: Path,
                          max_bytes: int = 512 * 1024 * 1024) -> list[Path]:
        return artifacts.download_artifact(self, repo, artifact, dest, max_bytes)

    def runner_registration_token(self, repo: str | None = None, org: str | None = None) -> dict[str, Any]:
        return runners.runner_registration_token(self, repo, org)

    def dispatch_workflow(self, repo: str, workflow: str, ref: str, inputs: dict[str, str]) -> None:
        workflows.dispatch_workflow(self, repo, workflow, ref, inputs)


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
