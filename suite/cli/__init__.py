"""The `trainbench` command line: a thin typer app, one module per command group.

`run` (run, study), `catalog` (list, env, spec, data), `results` (results, compare, baseline), `site`,
`gh` (gh, runner), `ab` (ab, calibrate, history). Each module's `register` adds its commands; heavy imports happen inside commands so
that `trainbench --help` is instant. Exit codes and the error style live in `common`.
"""

from __future__ import annotations

import typer

from suite.cli import ab, catalog, gh, results, run, site

app = typer.Typer(
    name="trainbench",
    help="Benchmark deep-learning training: time-to-accuracy and MFU, compared against baselines.\n\n"
    "Start with `trainbench list`, then `trainbench run cv/digits_cnn`. Results land in results/.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for _group in (run, catalog, results, gh, site, ab):
    _group.register(app)


def main() -> None:
    app()
