"""`trainbench gh ...` and `trainbench runner register`: the GitHub API helpers the workflows call."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from suite.cli.common import EXIT_FAIL, fail_input, say, say_err

gh_app = typer.Typer(help="GitHub API helpers for the workflows (token from $GITHUB_TOKEN).", no_args_is_help=True)
runner_app = typer.Typer(help="Self-hosted GitHub Actions runners.", no_args_is_help=True)

RepoOpt = Annotated[str | None, typer.Option(help="OWNER/NAME (default: $GITHUB_REPOSITORY)")]



def _gh_call(fn):
    """Run a GitHub call; turn its errors into a clear message and exit code (1 API failure, 2 bad input)."""
    from suite.github import GitHubError, redact

    try:
        return fn()
    except GitHubError as e:
        say_err(f"github: {redact(str(e))}")
        raise typer.Exit(EXIT_FAIL) from None
    except (ValueError, OSError) as e:
        raise fail_input(redact(str(e))) from None


def _repo(repo: str | None) -> str:
    value = repo or os.environ.get("GITHUB_REPOSITORY")
    if not value:
        raise fail_input("--repo OWNER/NAME is required (or set $GITHUB_REPOSITORY)")
    return value


MIB = 1024 * 1024
# every file a user names is read with a bound: `--body-file /dev/zero` once read until MemoryError
MAX_BODY_BYTES = 16 * MIB  # far above what GitHub keeps (a comment 65,536 chars, a summary 1 MiB)
MAX_HISTORY_BYTES = 64 * MIB
MAX_EXIT_CODE_BYTES = 64


def _read_bounded(path: Path, flag: str, max_bytes: int) -> bytes:
    """The file's bytes, refused (exit 2, naming the flag) when it holds more than `max_bytes`."""
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise fail_input(f"{flag} {path}: {e.strerror or e}") from None
    if len(data) > max_bytes:
        raise fail_input(f"{flag} {path}: more than {max_bytes:,} bytes (a device such as /dev/zero, or not the "
                         "file meant?): give the file that compare or history wrote")
    return data


def _read_bodies(files: list[Path], flag: str = "--body-file") -> str:
    parts = [_read_bounded(f, flag, MAX_BODY_BYTES).decode("utf-8", errors="replace") for f in files]
    return "\n\n".join(p.strip() for p in parts) + "\n"


def _state_of_exit_code_file(path: Path) -> str:
    """compare's exit code from an (untrusted) artifact file; missing, overlong or odd reads as error."""
    from suite.github import state_from_exit_code

    try:
        with open(path, "rb") as f:
            data = f.read(MAX_EXIT_CODE_BYTES + 1)
    except OSError:
        return "error"  # no verdict file: the benchmark job did not get as far as compare
    if len(data) > MAX_EXIT_CODE_BYTES:
        say_err(f"--exit-code-file {path}: more than {MAX_EXIT_CODE_BYTES} bytes, not an exit code; state error")
        return "error"
    return state_from_exit_code(data.decode("utf-8", errors="replace"))


@gh_app.command("comment")
def gh_comment(
    body_file: Annotated[list[Path], typer.Option("--body-file", help="markdown file(s), joined in order")],
    repo: RepoOpt = None,
    pr: Annotated[int | None, typer.Option(min=1, help="pull request number")] = None,
    issue: Annotated[int | None, typer.Option(min=1, help="an issue number instead (e.g. the nightly's change-point "
                                              "issue, for a bisect's result)")] = None,
    head_sha: Annotated[str | None, typer.Option(help="find the open PR with this head commit instead")] = None,
    head_label: Annotated[str | None, typer.Option(help="OWNER:BRANCH of the PR head, to find fork PRs")] = None,
    marker: Annotated[str, typer.Option(help="key of the hidden marker that makes the comment sticky")] = "bench",
    author: Annotated[str | None, typer.Option(help="only update a marked comment by this login")] = None,
) -> None:
    """Post the report as one sticky PR comment: updated in place if it exists, created otherwise."""
    from suite.github import GitHub

    name = _repo(repo)
    if sum(x is not None for x in (pr, issue, head_sha)) != 1:
        raise fail_input("give exactly one of --pr, --issue or --head-sha")
    pr = pr if issue is None else issue  # an issue's comments are the same endpoint as a PR's
    body = _read_bodies(body_file)

    def call():
        gh = GitHub()
        number = pr if pr is not None else gh.find_pull_request(name, head_sha or "", head_label)
        return gh.sticky_comment(name, number, body, key=marker, author=author)

    done = _gh_call(call)
    say(f"{done['action']} comment {done['id']} {done.get('url') or ''}")


@gh_app.command("status")
def gh_status(
    sha: Annotated[str, typer.Option(help="the commit (full SHA)")],
    repo: RepoOpt = None,
    state: Annotated[str | None, typer.Option(help="success | failure | error | pending")] = None,
    exit_code_file: Annotated[Path | None, typer.Option(help="a file holding compare's exit code (0/1/2)")] = None,
    context: Annotated[str, typer.Option(help="the status name shown on the PR")] = "trainbench",
    description: Annotated[str, typer.Option(help="one line, at most 140 characters")] = "",
    target_url: Annotated[str | None, typer.Option(help="link from the status (e.g. the workflow run)")] = None,
    check_run: Annotated[bool, typer.Option("--check-run", help="create a check run instead (checks: write)")] = False,
    summary_file: Annotated[Path | None, typer.Option(help="--check-run: markdown for the check's summary")] = None,
) -> None:
    """Set a commit status (or check run) carrying compare's verdict."""
    from suite.github import STATES, GitHub

    name = _repo(repo)
    if (state is None) == (exit_code_file is None):
        raise fail_input("give exactly one of --state or --exit-code-file")
    if exit_code_file is not None:
        state = _state_of_exit_code_file(exit_code_file)
    if state not in STATES:
        raise fail_input(f"--state {state!r}: expected one of {', '.join(STATES)}")
    words = {"success": "no regression", "failure": "regression found", "error": "benchmark or compare failed",
             "pending": "running"}
    desc = description or words[state]

    def call():
        gh = GitHub()
        if check_run:
            conclusion = {"success": "success", "failure": "failure", "error": "failure", "pending": "neutral"}[state]
            summary = _read_bodies([summary_file], "--summary-file") if summary_file else desc
            return gh.check_run(name, sha, context, conclusion, desc, summary, target_url)
        return gh.commit_status(name, sha, state, context, desc, target_url)

    _gh_call(call)
    say(f"{'check run' if check_run else 'status'} {context}: {state} on {sha[:12]}")


@gh_app.command("summary")
def gh_summary(
    body_file: Annotated[list[Path], typer.Option("--body-file", help="markdown file(s), joined in order")],
    out_file: Annotated[Path | None, typer.Option("--out", help="default: $GITHUB_STEP_SUMMARY")] = None,
) -> None:
    """Append markdown to the job summary ($GITHUB_STEP_SUMMARY)."""
    from suite.github import write_step_summary

    path = _gh_call(lambda: write_step_summary(_read_bodies(body_file), out_file))
    say_err(f"appended to {path}")


@gh_app.command("download-artifact")
def gh_download_artifact(
    run_id: Annotated[int, typer.Option(min=1, help="the workflow run that uploaded the artifacts")],
    dest: Annotated[Path, typer.Option(help="folder; each artifact goes to DEST/<artifact name>/")],
    repo: RepoOpt = None,
    name: Annotated[str | None, typer.Option(help="exactly this artifact")] = None,
    prefix: Annotated[str | None, typer.Option(help="every artifact whose name starts with this")] = None,
    max_mb: Annotated[int, typer.Option(min=1, help="refuse artifacts larger than this (packed or unpacked)")] = 512,
) -> None:
    """Download and safely extract a run's artifacts (untrusted data: no links, no path escapes, bounded)."""
    from suite.github import GitHub, GitHubError, redact

    full = _repo(repo)
    if (name is None) == (prefix is None):
        raise fail_input("give exactly one of --name or --prefix")

    def call():
        gh = GitHub()
        arts = [a for a in gh.list_artifacts(full, run_id)
                if (a.get("name") == name if name is not None else str(a.get("name", "")).startswith(prefix or ""))]
        if not arts:
            raise GitHubError(f"run {run_id} has no artifact {'named ' + repr(name) if name else 'starting ' + repr(prefix)}")
        got, bad = {}, []
        for a in arts:  # one bad artifact is reported and skipped: the others are still fetched
            safe = str(a["name"])
            try:
                if not safe or "/" in safe or "\\" in safe or safe in (".", ".."):
                    raise GitHubError(f"artifact name {safe!r} is not a plain name; refusing")
                got[safe] = gh.download_artifact(full, a, dest / safe, max_bytes=max_mb * 1024 * 1024)
            except GitHubError as e:
                bad.append(f"artifact {safe!r}: {e}")
        return got, bad

    got, bad = _gh_call(call)
    for art, files in got.items():
        say(f"{art}: {len(files)} file(s) -> {dest / art}")
    for line in bad:
        say_err(f"github: {redact(line)}")
    if bad:
        raise typer.Exit(EXIT_FAIL)


@runner_app.command("register")
def runner_register(
    labels: Annotated[str, typer.Option(help="comma-separated labels, e.g. gpu,h200 (self-hosted is implicit)")],
    repo: RepoOpt = None,
    org: Annotated[str | None, typer.Option(help="register at organisation level instead")] = None,
    name: Annotated[str | None, typer.Option(help="runner name (default: host name)")] = None,
    ephemeral: Annotated[bool, typer.Option(help="one job per registration (recommended)")] = True,
    runner_dir: Annotated[Path, typer.Option(help="the unpacked actions-runner folder")] = Path("actions-runner"),
    run_config: Annotated[bool, typer.Option("--run", help="run config.sh now instead of printing it")] = False,
    show_token: Annotated[bool, typer.Option(help="print the registration token in the command")] = False,
) -> None:
    """Get a runner registration token (needs an admin token in $GITHUB_TOKEN) and print or run config.sh."""
    import shlex

    from suite.github import GitHub, runner_config_command

    if org is None:
        target = _repo(repo)
        url = f"{os.environ.get('GITHUB_SERVER_URL', 'https://github.com').rstrip('/')}/{target}"
    else:
        target = None
        url = f"{os.environ.get('GITHUB_SERVER_URL', 'https://github.com').rstrip('/')}/{org}"
    label_list = [x.strip() for x in labels.split(",") if x.strip()]
    if not label_list:
        raise fail_input("--labels: give at least one label, e.g. --labels gpu,h200")
    data = _gh_call(lambda: GitHub().runner_registration_token(repo=target, org=org))
    cmd = _gh_call(lambda: runner_config_command(url, data["token"], label_list, name, ephemeral))
    shown = [("***" if (a == data["token"] and not show_token) else a) for a in cmd]
    if not run_config:
        say(f"cd {shlex.quote(str(runner_dir))} && {shlex.join(shown)}")
        say_err(f"token expires at {data.get('expires_at', '?')}")
        return
    if not (runner_dir / "config.sh").exists():
        raise fail_input(f"--runner-dir {runner_dir}: no config.sh there (unpack the actions-runner release first)")
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    say_err(f"running in {runner_dir}: {shlex.join(shown)}")
    raise typer.Exit(subprocess.call(cmd, cwd=runner_dir, env=env))




@gh_app.command("change-issues")
def gh_change_issues(
    history_file: Annotated[Path, typer.Option("--history", help="`trainbench history --json` output")],
    repo: RepoOpt = None,
    label: Annotated[str, typer.Option(help="label of the issues (and what is searched)")] = "change-point",
    only_worse: Annotated[bool, typer.Option(help="only change points that made a metric worse")] = True,
    bisect_workflow: Annotated[str | None, typer.Option(help="for each NEW change point with both commits known, "
                                                        "start this workflow (e.g. bisect.yml) with the range")] = None,
    runner_kinds: Annotated[str, typer.Option(help="runner kinds the bisect may run on (comma-separated); the one "
                                              "named in the change point's hardware slug is used")] = "h200,910b",
    ref: Annotated[str, typer.Option(help="the branch the bisect workflow runs from")] = "main",
) -> None:
    """Open, or update in place, one GitHub issue per change point of the nightly history; with
    --bisect-workflow, start a bisect of each new one on the same runner kind."""
    import json

    from suite.github import GitHub, upsert_issue

    try:
        report = json.loads(_read_bounded(history_file, "--history", MAX_HISTORY_BYTES))
        points = [c for c in report["change_points"] if c["worse"] or not only_worse]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise fail_input(f"--history {history_file}: not a `trainbench history --json` report ({e})") from None
    name = _repo(repo)
    gh = _gh_call(GitHub)
    for c in points:
        title = (f"Change point: {c['workload']} {c['metric']} {c['change']:+.1%} on {c['hardware']} "
                 f"({c['backend']}, {c['precision']})")
        body = (f"`trainbench history` found a change point (p = {c['p_value']:.3g}) in {c['metric']} of "
                f"`{c['workload']}` on {c['hardware']} ({c['backend']}, {c['precision']}, {c['mode']}): "
                f"{c['before']:.6g} -> {c['after']:.6g} ({c['change']:+.1%}).\n\nThe change is between commits "
                f"`{c['before_sha'] or '?'}` ({c['before_at']}) and `{c['after_sha'] or '?'}` ({c['after_at']}).\n")
        done = _gh_call(lambda title=title, body=body, c=c: upsert_issue(gh, name, c["id"], title, body, (label,)))
        say(f"{done['action']} issue #{done['number']}: {title}")
        if bisect_workflow and done["action"] == "created":
            inputs = bisect_inputs(c, int(done["number"]), [k.strip() for k in runner_kinds.split(",") if k.strip()])
            if isinstance(inputs, str):
                say(f"no bisect for issue #{done['number']}: {inputs}")
                continue
            _gh_call(lambda inputs=inputs: gh.dispatch_workflow(name, bisect_workflow, ref, inputs))
            say(f"started {bisect_workflow} on {inputs['runner']}: {inputs['good'][:12]}..{inputs['bad'][:12]} "
                f"{inputs['workload']} ({inputs['metric']}), result to issue #{done['number']}")


BISECT_METRIC = {"time_per_step_s": "step_time", "samples_per_s": "step_time", "time_to_target_s": "time_to_target"}


def bisect_inputs(c: dict, issue: int, kinds: list[str]) -> dict[str, str] | str:
    """The bisect workflow's inputs for one change point, or why it cannot be bisected."""
    if not c.get("before_sha") or not c.get("after_sha"):
        return "a commit of the range is not known (results without git info)"
    kind = next((k for k in kinds if k.lower() in str(c["hardware"]).lower()), None)
    if kind is None:
        return f"hardware {c['hardware']} is none of the runner kinds {', '.join(kinds)}"
    if c["metric"] not in BISECT_METRIC:
        return f"metric {c['metric']} is not one bisect measures"
    return {"good": str(c["before_sha"]), "bad": str(c["after_sha"]), "workload": str(c["workload"]),
            "metric": BISECT_METRIC[c["metric"]], "runner": kind, "backend": str(c["backend"]), "issue": str(issue)}


def register(app: typer.Typer) -> None:
    app.add_typer(gh_app, name="gh")
    app.add_typer(runner_app, name="runner")
