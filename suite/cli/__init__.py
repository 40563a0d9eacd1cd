"""The `trainbench` command line: a thin typer app, one module per command group.

`run` (run, study), `list_`, `env`, `spec`, `data`, `results` (results, compare, baseline), `site`,
`gh` (gh, runner), `ab`, `bisect`, `calibrate`, `history`, `mllog` (mllog check), `plan`. Each module's `register` adds its commands; heavy imports happen inside commands so
that `trainbench --help` is instant. Exit codes and the error style live in `common`.

May import: `suite` (any package: the command line is the top of the graph).
"""

from __future__ import annotations

import typer

from suite.cli import (
    ab,
    bisect,
    calibrate,
    data,
    env,
    gh,
    history,
    list_,
    mllog,
    plan,
    results,
    run,
    site,
    spec,
)

app = typer.Typer(
    name="trainbench",
    help="Benchmark deep-learning training: time-to-accuracy and MFU, compared against baselines.\n\n"
    "Start with `trainbench list`, then `trainbench run cv/digits_cnn`. Results land in results/.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for _group in (run, list_, env, spec, data, results, gh, site, ab, bisect, calibrate, history, mllog, plan):
    _group.register(app)


def main() -> None:
    """The console entry (`trainbench`, `python -m suite.cli`). It ends the process (see `_exit`): code that
    embeds the CLI and wants control back (tests) calls `app()`, which raises SystemExit as usual."""
    try:
        app()
    except SystemExit as e:
        code = e.code
    else:
        code = 0
    _exit(code)


def _exit(code: int | str | None) -> None:
    """End the process without tearing torch down: once torch is imported, the interpreter's own teardown (every
    module and object freed, the libraries' destructors) takes 0.2-0.6 s on a 2-core machine, and the fork
    server's as long again while it holds our stdout (a pipe reader waits for both). The exit handlers still
    run (multiprocessing's temp folders, logging); the warm fork server is killed (it holds nothing but imports).
    Without torch, with Ray in the process (its shutdown is more than a handler), or with a non-daemon thread
    still running (the interpreter would wait for it), a normal exit."""
    import sys
    import threading

    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if "torch" not in sys.modules or "ray" in sys.modules or others:
        sys.exit(code)
    import atexit
    import os

    if isinstance(code, str):  # sys.exit("message"): printed to stderr, status 1
        print(code, file=sys.stderr)
        code = 1
    forkserver = sys.modules.get("suite.execution.forkserver")
    if forkserver is not None and forkserver._context is not None:
        forkserver.stop()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    os._exit(code or 0)
