"""`trainbench spec`: the JSON Schema of a workload spec, and validating spec files."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from suite.cli.common import EXIT_INPUT, EXIT_OK, err, out

spec_app = typer.Typer(help="Workload specs: JSON Schema for editors, validation.", no_args_is_help=True)


@spec_app.command("schema")
def spec_schema(out_file: Annotated[Path | None, typer.Option("--out", help="write here instead of stdout")] = None):
    """The JSON Schema of a workload spec (point your editor's YAML plugin at it)."""
    from suite.spec import json_schema

    text = json.dumps(json_schema(), indent=2)
    if out_file:
        out_file.write_text(text + "\n", encoding="utf-8")
        err.print(f"wrote {out_file}", markup=False, highlight=False)
    else:
        sys.stdout.write(text + "\n")


@spec_app.command("validate")
def spec_validate(paths: Annotated[list[Path], typer.Argument(help="spec files")]) -> None:
    """Validate spec files; prints each problem with file and field, exits 2 if any is invalid.

    Validating imports every plug-in the spec names by import path (task, model.arch, data.name, optimizer.name,
    schedule.name, loss, compression, grpo.reward: `pkg.module:attr`), and importing a module runs its code:
    validate only specs you would run."""
    from suite.spec import SpecError
    from suite.specload import load_spec

    bad = 0
    for p in paths:
        try:
            spec = load_spec(p)
            out.print(f"ok {p} ({spec.name}, hash {spec.spec_hash()})", markup=False, highlight=False)
        except SpecError as e:
            bad += 1
            err.print(str(e), markup=False, highlight=False)
    raise typer.Exit(EXIT_INPUT if bad else EXIT_OK)


def register(app: typer.Typer) -> None:
    app.add_typer(spec_app, name="spec")
