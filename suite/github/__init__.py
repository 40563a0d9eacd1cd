"""GitHub REST client over requests: sticky PR comments, commit statuses and check runs, job summaries,
workflow artifacts, runner registration tokens, change-point issues and workflow dispatches (the nightly's bisect),
with bounded retries and a token that never leaks.

Modules: `transport` (token, errors, retries, one call, origin check), `pagination`, `artifacts`
(download + safe zip extraction), `runners` (registration), `workflows` (workflow_dispatch), `client` (the `GitHub` class the CLI uses).

May import: no other suite package.
"""

from suite.github.artifacts import safe_extract
from suite.github.client import (
    MARKER_PREFIX,
    MAX_COMMENT_CHARS,
    MAX_STATUS_DESCRIPTION,
    MAX_SUMMARY_BYTES,
    STATE_OF_EXIT,
    STATES,
    GitHub,
    state_from_exit_code,
    write_step_summary,
)
from suite.github.issues import ISSUE_MARKER_PREFIX, upsert_issue
from suite.github.runners import runner_config_command
from suite.github.transport import (
    API_VERSION,
    DEFAULT_API_URL,
    AuthError,
    GitHubError,
    NotFound,
    RateLimited,
    RetryPolicy,
    check_repo,
    check_token,
    redact,
    register_secret,
    same_origin,
    token_from_env,
)

__all__ = [
    "API_VERSION", "DEFAULT_API_URL", "ISSUE_MARKER_PREFIX", "MARKER_PREFIX", "MAX_COMMENT_CHARS", "MAX_STATUS_DESCRIPTION",
    "MAX_SUMMARY_BYTES", "STATES", "STATE_OF_EXIT", "AuthError", "GitHub", "GitHubError", "NotFound",
    "RateLimited", "RetryPolicy", "check_repo", "check_token", "redact", "register_secret", "runner_config_command",
    "safe_extract", "same_origin", "state_from_exit_code", "token_from_env", "upsert_issue", "write_step_summary",
]
