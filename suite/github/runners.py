"""Self-hosted runner registration: a one-hour registration token and the `config.sh` command line."""

from __future__ import annotations

import re
from typing import Any

from suite.github.transport import GitHubError, Transport, check_repo, register_secret


def runner_registration_token(gh: Transport, repo: str | None = None, org: str | None = None) -> dict[str, Any]:
    """A one-hour token for `config.sh` (needs a token with repo admin or org self-hosted-runner rights)."""
    if (repo is None) == (org is None):
        raise ValueError("give exactly one of repo or org")
    if repo is not None:
        check_repo(repo)
        path = f"/repos/{repo}/actions/runners/registration-token"
    else:
        if not re.fullmatch(r"[A-Za-z0-9-]+", org or ""):
            raise ValueError(f"org {org!r}: not an organisation name")
        path = f"/orgs/{org}/actions/runners/registration-token"
    data = gh.json("POST", path, ok=(201, 200))
    if not isinstance(data, dict) or "token" not in data:
        raise GitHubError(f"POST {path}: the response has no token")
    register_secret(str(data["token"]))
    return data


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
