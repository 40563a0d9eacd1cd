"""Starting a workflow run (`workflow_dispatch`): the nightly opens a bisect job for each new change point."""

from __future__ import annotations

import re
from typing import Any

from suite.github.transport import Transport, check_repo

WORKFLOW_RE = re.compile(r"^[A-Za-z0-9_.-]+\.ya?ml$|^[0-9]+$")
MAX_INPUTS = 10  # GitHub's limit on a workflow_dispatch's inputs


def dispatch_workflow(gh: Transport, repo: str, workflow: str, ref: str, inputs: dict[str, str]) -> None:
    """POST .../actions/workflows/{workflow}/dispatches (needs `actions: write`); GitHub answers 204, no body."""
    check_repo(repo)
    if not WORKFLOW_RE.fullmatch(workflow):
        raise ValueError(f"workflow {workflow!r}: expected a file name such as bisect.yml (or its numeric id)")
    if len(inputs) > MAX_INPUTS or not all(isinstance(v, str) for v in inputs.values()):
        raise ValueError(f"workflow inputs: at most {MAX_INPUTS}, each a string")
    body: dict[str, Any] = {"ref": ref, "inputs": inputs}
    gh.request("POST", f"/repos/{repo}/actions/workflows/{workflow}/dispatches", json_body=body, ok=(204,))
