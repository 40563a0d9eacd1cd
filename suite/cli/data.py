"""`trainbench data`: which data sets are here, and getting or indexing one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from suite.cli.common import emit_json, fail_input, out

data_app = typer.Typer(help="Data sets: which are here, and getting or indexing one.", no_args_is_help=True)


@data_app.command("list")
def data_list(json_: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every data set the workloads use, where it comes from, and whether this machine has it."""
    from suite.data.prepare import listing

    rows = listing()
    if json_:
        emit_json(rows)
        return
    table = Table(title="Data sets ($TRAINBENCH_DATA)")
    for col in ("name", "source", "origin", "here", "where / how to get it"):
        table.add_column(col)
    for r in rows:
        how = f"trainbench data prepare {r['name']}" + (" --from PATH" if r["source"] == "local" else "")
        table.add_row(escape(r["name"]), escape(r["source"]), escape(r["origin"]), "yes" if r["present"] else "no",
                      escape(r["where"] if r["present"] else how))
    out.print(table)


@data_app.command("prepare")
def data_prepare(
    name: Annotated[str, typer.Argument(help="a data set name from `trainbench data list`")],
    from_: Annotated[Path | None, typer.Option("--from", help="a local copy to check, index and link")] = None,
    synthetic: Annotated[bool, typer.Option(
        "--synthetic", help="write small seeded files in the real on-disk format instead (to try a full recipe's "
        "tiny variant; runs on them are marked synthetic and kept off the leaderboards)")] = False,
    seed: Annotated[int, typer.Option("--seed", help="with --synthetic: the generator's seed")] = 0,
) -> None:
    """Install a registry data set, or check and index a local copy (--from), or download where possible;
    --synthetic writes a stand-in in the real format."""
    from suite.data.base import DataMissing
    from suite.data.prepare import prepare, prepare_synthetic

    if synthetic and from_ is not None:
        raise fail_input("--synthetic and --from: give one (--from links a real copy, --synthetic writes a stand-in)")
    if from_ is not None and not from_.exists():
        raise fail_input(f"--from {from_}: no such file or folder")
    try:
        message = prepare_synthetic(name, seed) if synthetic else prepare(name, from_)
        out.print(message, highlight=False, markup=False)
    except KeyError as e:
        raise fail_input(str(e.args[0])) from None
    except (DataMissing, FileExistsError, ModuleNotFoundError) as e:
        raise fail_input(str(e)) from None


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
