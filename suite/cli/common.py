"""What every command shares: the consoles, the exit codes and the ONE error style.

Exit codes: 0 success; 1 a run ended badly (error, diverged, interrupted) or a check found a problem;
2 bad input (unknown workload, invalid spec or flag, missing data). Errors go to stderr as one line
`error: <what> <what to do>` naming the file, field or flag; paths and run output are never read as markup.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from suite.results.tree import TrainbenchWarning

# Not a terminal (a CI log, `make demo | tee`): rich would assume 80 columns and fold every table into
# multi-line cells. There is no width to fit there, so tables take the width they need. $COLUMNS still wins.
NON_TTY_WIDTH = 1000


def _stdout_width() -> int | None:
    if os.environ.get("COLUMNS") or sys.stdout.isatty():
        return None  # rich's own choice: the terminal's width, or $COLUMNS
    return NON_TTY_WIDTH


out = Console(width=_stdout_width())
err = Console(stderr=True, soft_wrap=True)  # never wrap an error message mid-field

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """A TrainbenchWarning (a skipped path, an index that cannot be used) as one line `warning: ...` on stderr;
    any other warning as Python shows it."""
    if issubclass(category, TrainbenchWarning):
        err.print(f"[yellow]warning:[/yellow] {escape(str(message))}", highlight=False)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning
warnings.showwarning = _show_warning


def fail_input(message: str) -> typer.Exit:
    """Print `error: message` on stderr and return the exit (code 2) to raise: bad input, nothing recorded."""
    # escape(): messages carry file names and run output, and `[/x]` in them would be read as rich markup
    err.print(f"[red]error:[/red] {escape(message)}", markup=True, highlight=False)
    return typer.Exit(EXIT_INPUT)


def check_writable(folder: Path, flag: str, what: str) -> None:
    """Fail before the first run, not after it, when an output folder cannot be written (exit 2, nothing
    measured): made if missing, then probed with a file, so a read-only folder or one below a file is named."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as e:
        raise fail_input(f"{flag} {folder}: cannot write {what} there ({e.strerror or e}); give {flag} a "
                         "folder you can write") from None


F = TypeVar("F", bound=Callable[..., Any])


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so that the interpreter's last flush cannot raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def never_exit_1(command: F) -> F:
    """For a command whose exit 1 means one thing only (`compare`: a regression): every other way out is exit 2.

    A reader that closes the pipe early (`compare ... | head -1`), an interruption, or an unexpected exception used
    to end in a traceback and Python's exit 1, which CI reads as "regression". Exit codes the command chose itself
    (typer.Exit, usage errors) pass through unchanged."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - the contract is the exit code
            import click

            if isinstance(e, click.exceptions.ClickException):
                raise
            if isinstance(e, BrokenPipeError):
                _quiet_stdout()
                say_err("error: stdout was closed before the report was written in full (a pipe such as `| head`): "
                        "no verdict, exit 2; write the report with --out FILE and read that instead")
            elif isinstance(e, KeyboardInterrupt):
                say_err("error: interrupted; no verdict")
            else:
                say_err("".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip())
                say_err(f"error: unexpected {type(e).__name__}: {e}; no verdict (exit 2, never 1: 1 means a "
                        "regression). Please report this with the traceback above")
            raise typer.Exit(EXIT_INPUT) from None

    return wrapper  # type: ignore[return-value]


def say(text: str) -> None:
    """Plain stdout, never re-wrapped (rich would break a printed command line at the terminal width)."""
    sys.stdout.write(text + "\n")


def say_err(text: str) -> None:
    sys.stderr.write(text + "\n")


def strict_json(data: Any) -> Any:
    """NaN/inf as the strings the result files use: a bare NaN token is not JSON (jq and browsers refuse it)."""
    if isinstance(data, float) and data != data:
        return "NaN"
    if isinstance(data, float) and data in (float("inf"), float("-inf")):
        return "Infinity" if data > 0 else "-Infinity"
    if isinstance(data, dict):
        return {k: strict_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict_json(v) for v in data]
    return data


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(strict_json(data), indent=2, default=str, allow_nan=False) + "\n")
