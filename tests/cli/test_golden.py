"""The command line's outputs that must not change by accident (issue 43: "Behaviour, CLI, file formats and recorded
results stay as they are"): every command's `--help` at a fixed width (COLUMNS=100, no colour), `spec schema`,
`list --json`, `list --matrix --why --json`, and `results show/validate` and `compare` on a fixed simulated results
folder (fixed run ids, times and figures), each compared with its file under tests/cli/golden/.

A deliberate change rewrites them: `make golden` (TRAINBENCH_UPDATE_GOLDEN=1 pytest tests/cli/test_golden.py), then
review `git diff tests/cli/golden/` and commit it with the change. Everything runs in-process (typer's CliRunner).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from benchmarks.sim.results import simulated_result, write_all
from suite.cli import app

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("TRAINBENCH_UPDATE_GOLDEN", "") not in ("", "0")
HOW = ("If the change is deliberate, rewrite the golden files with `make golden` (or TRAINBENCH_UPDATE_GOLDEN=1 "
       "pytest tests/cli/test_golden.py), review `git diff tests/cli/golden/` and commit them with the change.")
ENV = {"COLUMNS": "100", "LINES": "50", "NO_COLOR": "1", "TERM": "dumb", "TRAINBENCH_INDEX": "0"}


@pytest.fixture()
def cli(monkeypatch):
    """Invoke the app in-process at the fixed width, without colour whatever the CI says (GITHUB_ACTIONS and
    FORCE_COLOR make typer force a terminal; TERMINAL_WIDTH is read at typer's import, FORCE_COLOR and COLUMNS at
    suite.cli.common's)."""
    from typer import rich_utils

    from suite.cli import common

    # the CLI's own consoles were made when suite.cli was imported, under whatever this process's environment was
    for console in (common.out, common.err):
        monkeypatch.setattr(console, "_force_terminal", False)
        monkeypatch.setattr(console, "_color_system", None)  # rich writes no escape code at all
        monkeypatch.setattr(console, "no_color", True)
        monkeypatch.setattr(console, "_width", 100)
    monkeypatch.setattr(rich_utils, "MAX_WIDTH", 100)
    monkeypatch.setattr(rich_utils, "FORCE_TERMINAL", False)
    monkeypatch.setattr(rich_utils, "COLOR_SYSTEM", None)
    for name in ("FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS", "TERMINAL_WIDTH", "CLICOLOR_FORCE"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()

    def invoke(*args: str) -> str:
        r = runner.invoke(app, list(args), env=ENV, catch_exceptions=False)
        text = f"$ trainbench {' '.join(args)}\nexit {r.exit_code}\n" + r.stdout
        return text + (f"--- stderr\n{r.stderr}" if r.stderr else "")

    return invoke


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.is_file():
        pytest.fail(f"{path.relative_to(GOLDEN.parents[2])}: no golden file. {HOW}")
    want = path.read_text(encoding="utf-8")
    if text != want:
        diff = "".join(list(difflib.unified_diff(want.splitlines(True), text.splitlines(True), f"golden/{name}",
                                                 "now"))[:80])
        pytest.fail(f"the output of `{text.splitlines()[0][2:]}` changed from tests/cli/golden/{name}. {HOW}\n{diff}",
                    pytrace=False)


def commands() -> list[tuple[str, ...]]:
    """Every command path of the app, groups included: () is `trainbench` itself."""
    out: list[tuple[str, ...]] = []

    def walk(cmd: Any, path: tuple[str, ...]) -> None:  # typer's own click (typer._click): a group has .commands
        out.append(path)
        if isinstance(getattr(cmd, "commands", None), dict):
            for name in sorted(cmd.commands):
                if not cmd.commands[name].hidden:
                    walk(cmd.commands[name], (*path, name))

    walk(typer.main.get_command(app), ())
    return out


def _name(path: tuple[str, ...]) -> str:
    return "help/" + ("-".join(path) or "trainbench") + ".txt"


def test_every_command_help(cli) -> None:
    paths = commands()
    assert len(paths) > 30 and ("results", "show") in paths and ("site", "build") in paths
    for path in paths:
        check(_name(path), cli(*path, "--help"))
    if not UPDATE:  # a command that is gone leaves a golden file nobody checks: that is a change too
        stale = sorted({p.relative_to(GOLDEN).as_posix() for p in (GOLDEN / "help").glob("*.txt")}
                       - {_name(p) for p in paths})
        assert not stale, f"golden help files of commands that no longer exist: {stale}. {HOW}"


@pytest.mark.parametrize("args", [("spec", "schema"), ("list", "--json"), ("list", "--matrix", "--why", "--json")],
                         ids=lambda a: "-".join(x.strip("-") for x in a))
def test_catalog_outputs(cli, args: tuple[str, ...]) -> None:
    check("-".join(a.strip("-") for a in args) + ".txt", cli(*args))


def _results(root: Path) -> None:
    """5 baseline and 5 candidate seeds of cv/digits_cnn on one CPU: the candidate takes 20% longer per step (a
    regression compare must find) at the same steps to target; fixed ids, start times and figures."""
    steps = [1000, 1010, 990, 1005, 995]
    tps = [0.0100, 0.0101, 0.0099, 0.0100, 0.0102]
    write_all(root / "base", [simulated_result(s, steps_to_target=steps[s], time_per_step_s=tps[s],
                                               run_id=f"base{s:04d}") for s in range(5)])
    write_all(root / "cand", [simulated_result(s, steps_to_target=steps[s], time_per_step_s=1.2 * tps[s],
                                               run_id=f"cand{s:04d}") for s in range(5)])


def test_results_and_compare_on_a_fixed_folder(cli, tmp_path, monkeypatch) -> None:
    _results(tmp_path)
    monkeypatch.chdir(tmp_path)  # relative paths in, relative paths out: nothing of this machine in the files
    check("results-show.txt", cli("results", "show", "base"))
    check("results-validate.txt", cli("results", "validate", "base"))
    check("compare.txt", cli("compare", "-b", "base", "-c", "cand"))
    check("compare-json.txt", cli("compare", "-b", "base", "-c", "cand", "--format", "json"))
