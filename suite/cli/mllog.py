"""`trainbench mllog check`: a run's :::MLLOG log through MLPerf's official compliance checker (mlperf-logging).

The ruleset comes from the spec: a spec naming an `mlperf_benchmark` (an MLPerf Training 6.1 benchmark,
suite.spec.MlperfBenchmark) gets the whole training_6.1.0 chain (common, the division's, the benchmark's own
file), as `python -m mlperf_logging.compliance_checker --usage training --ruleset 6.1.0 LOG` runs it; any other
workload gets the common rules only (suite/measure/mllog.py says why). Exit 0 accepted, 1 rejected, 2 bad input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from suite.cli.common import EXIT_FAIL, EXIT_OK, emit_json, fail_input, out

mllog_app = typer.Typer(help="MLPerf :::MLLOG logs: the official compliance checker.", no_args_is_help=True)
RULESET = "6.1.0"  # the MLPerf Training round suite.spec.MlperfBenchmark's names come from (training_6.1.0)


def _log_and_workload(path: Path) -> tuple[Path, str | None]:
    """A result JSON (its `mllog` beside it, its workload) or a log file (the workload, if any, from --workload)."""
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise fail_input(f"{path}: not a readable result file ({e})") from None
        name = data.get("mllog") if isinstance(data, dict) else None
        if not isinstance(name, str) or not name:
            raise fail_input(f"{path}: this result names no MLLOG log (field `mllog`)")
        log = path.parent / name
        if not log.is_file():
            raise fail_input(f"{path}: its MLLOG log {log} is missing")
        return log, data.get("workload") if isinstance(data.get("workload"), str) else None
    return path, None


@mllog_app.command("check")
def check(
    log: Annotated[Path, typer.Argument(help="a run's result JSON (its log beside it) or a :::MLLOG log file")],
    workload: Annotated[str | None, typer.Option(
        help="the workload the log is of (default: the result's; else the log's submission_benchmark)")] = None,
    json_: Annotated[bool, typer.Option("--json", help="the verdict and the checker's messages as JSON")] = False,
) -> None:
    """Check a run's MLLOG with MLPerf's official compliance checker, the ruleset taken from the workload's spec."""
    from suite import registry
    from suite.measure import mllog as mllog_mod
    from suite.spec import MLPERF_BENCHMARKS, SpecError
    from suite.specload import load_spec_schema

    if not log.is_file():
        raise fail_input(f"{log}: no such file (give a result JSON or its .mllog file)")
    path, from_result = _log_and_workload(log)
    try:
        events = mllog_mod.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError) as e:
        raise fail_input(f"{path}: not an MLLOG log ({e})") from None
    if not events:
        raise fail_input(f"{path}: no :::MLLOG line (is it a run's log?)")
    logged = next((e.get("value") for e in events if e.get("key") == "submission_benchmark"), None)
    name = workload or from_result
    benchmark = None
    if name is not None:
        try:
            spec = load_spec_schema(registry.find_workload(name))
        except (registry.RegistryError, SpecError) as e:
            raise fail_input(f"--workload: {e}") from None
        benchmark = spec.mlperf_benchmark
        if benchmark is not None and logged != benchmark:
            raise fail_input(f"{path}: logs submission_benchmark {logged!r}, but {name} is MLPerf's {benchmark!r}")
    elif logged in MLPERF_BENCHMARKS:
        benchmark = logged
    rules = (f"training_{RULESET} (common, the division's, {benchmark}'s own rules)" if benchmark
             else f"training_{RULESET} common rules (not an MLPerf benchmark)")
    ok, messages = (mllog_mod.check_benchmark if benchmark else mllog_mod.check_common)(path, RULESET)
    if json_:
        emit_json({"log": str(path), "workload": name, "mlperf_benchmark": benchmark, "ruleset": RULESET,
                   "rules": rules, "passed": ok, "messages": messages})
    else:
        out.print(f"{'accepted' if ok else 'REJECTED'}: {path} by MLPerf's compliance checker, {rules}",
                  markup=False, highlight=False)
        for m in messages:
            out.print(f"  {m}", markup=False, highlight=False)
    raise typer.Exit(EXIT_OK if ok else EXIT_FAIL)


def register(app: typer.Typer) -> None:
    app.add_typer(mllog_app, name="mllog")
