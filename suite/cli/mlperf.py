"""`results import-mlperf` and `results export-mlperf`: published MLPerf Training submissions in, submission packages out
(docs/mlperf.md). The reading, scoring and writing live in suite/mlperf/; this module only parses flags and reports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from suite.cli.common import EXIT_FAIL, EXIT_OK, err, fail_input, out


def results_import_mlperf(
    path: Annotated[Path, typer.Argument(help="a submitter folder (results/ + systems/) or a whole MLPerf Training "
                                               "results repository (one folder per submitter)")],
    results: Annotated[Path, typer.Option("--results", help="the results folder")] = Path("results"),
    round_: Annotated[str | None, typer.Option("--round", help="MLPerf round, e.g. 5.1 (default: from a "
                                                                "training_results_vX.Y folder in PATH)")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="processes reading logs (default: the CPU count)")] = None,
    scores_csv: Annotated[Path | None, typer.Option("--scores-csv", help="also write MLPerf's scores (the result "
                                                      "summarizer's columns, minutes) here")] = None,
) -> None:
    """Import published MLPerf Training logs as results marked `imported` (never a local run's seeds). Exit 0:
    all imported (or already there); 1: some files were skipped, each named; 2: bad input."""
    if not path.is_dir():
        raise fail_input(f"{path}: no such folder (a submitter folder or an MLPerf results repository)")
    from suite.mlperf import tree

    if not tree.submitter_dirs(path):
        raise fail_input(f"{path}: no submitter folder (results/ and systems/) in it or under it")
    ruleset = tree.round_of(path) if round_ is None else f"{round_}.0" if round_.count(".") == 1 else round_
    if ruleset is None:
        raise fail_input(f"{path}: cannot tell the MLPerf round from the path; pass --round (e.g. --round 5.1)")
    from rich.progress import Progress

    from suite.mlperf import importer
    from suite.results.record import ResultWriteError

    if ruleset.count(".") != 2 or not _ruleset_known(ruleset):
        raise fail_input(f"--round {round_ or ruleset}: mlperf_logging has no training ruleset {ruleset}")
    results.mkdir(parents=True, exist_ok=True)
    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("reading and checking logs", total=None)
        try:
            report = importer.import_tree(path, results, ruleset, workers=workers,
                                          progress=lambda done, total: bar.update(task, completed=done, total=total))
        except ResultWriteError as e:
            raise fail_input(str(e)) from None
    if scores_csv is not None:
        from suite.mlperf import score

        score.write_csv(report.rows, scores_csv, ruleset)
    for line in report.skipped:
        err.print(f"skipped {line}", markup=False, highlight=False, soft_wrap=True)
    out.print(f"imported {len(report.imported)} result(s) from {report.logs} log(s) under {path} into {results}; "
              f"{report.already} already imported, {len(report.skipped)} skipped; {len(report.rows)} system(s) scored",
              markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_FAIL if report.skipped else EXIT_OK)


def results_export_mlperf(
    out_dir: Annotated[Path, typer.Option("--out", help="a new folder for the submission package")],
    system_fields: Annotated[Path, typer.Option("--system-fields", help="JSON with the system description's "
                                                "fields only a person knows: submitter, division, status (and any "
                                                "other systems/<system>.json field to set)")],
    results: Annotated[Path, typer.Option("--results", help="the results folder")] = Path("results"),
    workload: Annotated[str | None, typer.Option(help="only this workload, e.g. nlp/llama31_8b")] = None,
    ruleset: Annotated[str, typer.Option(help="the MLPerf Training ruleset the package is for")] = "6.1.0",
) -> None:
    """Write a submission-shaped folder (results/<system>/<benchmark>/result_N.txt, systems/<system>.json) from
    local runs of MLPerf-named workloads. Exit 0: every log passes the official compliance checker; 1: written,
    but some logs break a rule (each named with its keys); 2: bad input."""
    from suite.mlperf import export as ex

    if not results.is_dir():
        raise fail_input(f"--results {results}: no such folder")
    if not _ruleset_known(ruleset):
        raise fail_input(f"--ruleset {ruleset}: mlperf_logging has no training ruleset {ruleset}")
    try:
        person = ex.read_person_fields(system_fields)
        report = ex.export(results, out_dir, person, workload=workload, ruleset=ruleset)
    except ex.ExportError as e:
        raise fail_input(str(e)) from None
    for log, keys in report.failed.items():
        err.print(f"breaks the {ruleset} rules: {log}: {', '.join(keys)}", markup=False, highlight=False,
                  soft_wrap=True)
    out.print(f"wrote {len(report.logs)} log(s) and {len(report.systems)} system description(s) under {out_dir}; "
              f"{len(report.failed)} log(s) break a rule; check it with `python -m mlperf_logging.package_checker "
              f"{out_dir}/<submitter> training {ruleset}`", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_FAIL if report.failed else EXIT_OK)


def _ruleset_known(ruleset: str) -> bool:
    from mlperf_logging.compliance_checker.mlp_compliance import rule_choices

    return ruleset in rule_choices()


def register(results_app: typer.Typer) -> None:
    results_app.command("import-mlperf")(results_import_mlperf)
    results_app.command("export-mlperf")(results_export_mlperf)
