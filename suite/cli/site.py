"""`trainbench site build|serve`: the static leaderboard site."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from suite.cli.common import EXIT_FAIL, EXIT_INPUT, err, fail_input, out

site_app = typer.Typer(help="The static leaderboard site: build it from results/, preview it.", no_args_is_help=True)




@site_app.command("build")
def site_build(
    results: Annotated[Path, typer.Option(help="results folder (or one result file)")] = Path("results"),
    baselines: Annotated[Path | None, typer.Option(help="baselines folder (read if it exists)")] = Path("baselines"),
    compare: Annotated[list[Path] | None, typer.Option(help="a compare JSON report to render (repeatable)")] = None,
    study: Annotated[list[Path] | None, typer.Option(
        help="a study report (study.json, or the folder `trainbench study --out` wrote) to render (repeatable)")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="output folder")] = Path("site/_build"),
    strict: Annotated[bool, typer.Option(help="fail on the first corrupt input file instead of skipping it")] = False,
) -> None:
    """Render the static site (works from file:// and any static host). Skipped input files are named."""
    from suite.results.record import ResultError
    from suite.site.build import SiteError, build_site

    try:
        report = build_site(results, out_dir, baselines=baselines, compare=compare or [], strict=strict,
                            studies=study or [])
    except (SiteError, ResultError) as e:
        err.print(f"[red]error:[/red] {escape(str(e))}", highlight=False)
        raise typer.Exit(EXIT_FAIL if isinstance(e, ResultError) else EXIT_INPUT) from None
    except OSError as e:  # a full or read-only disk under --out: one line, not a traceback (issue 50 item 14)
        import errno

        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        where = f" ({e.filename})" if e.filename else ""
        raise fail_input(f"--out {out_dir}: cannot write the site there: {e.strerror}{where}; the site that was "
                         "there is left as it was") from None
    for s in report.skipped:
        err.print(f"[yellow]skipped[/yellow] {escape(s)}", highlight=False)
    out.print(f"built {report.pages} pages from {report.results} results ({report.workloads} workloads) in "
              f"{report.seconds:.2f} s; index {report.index_bytes / 1024:.0f} KiB", highlight=False)
    out.print(f"open {report.index.resolve().as_uri()}", highlight=False, soft_wrap=True, markup=False)


@site_app.command("serve")
def site_serve(
    out_dir: Annotated[Path, typer.Option("--out", help="the built site folder")] = Path("site/_build"),
    port: Annotated[int, typer.Option(min=0, max=65535, help="port on 127.0.0.1 (0: any free port)")] = 8000,
) -> None:
    """Preview the built site on http://127.0.0.1:PORT/ (loopback only; Ctrl-C stops it)."""
    from suite.site.build import SiteError, serve

    try:
        serve(out_dir, port, announce=lambda line: (out.print(line, highlight=False, soft_wrap=True),
                                                   sys.stdout.flush()))
    except SiteError as e:
        raise fail_input(str(e)) from None
    except OSError as e:
        raise fail_input(f"--port {port}: cannot listen on 127.0.0.1: {e}") from None



def register(app: typer.Typer) -> None:
    app.add_typer(site_app, name="site")
