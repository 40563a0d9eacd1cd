"""The results folder and what reads it: `results validate|show|index|archive|import-mlperf|export-mlperf`, `compare`, `baseline promote`."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from suite.cli.common import EXIT_FAIL, EXIT_OK, emit_json, err, fail_input, never_exit_1, out

MIN_SEEDS = 4  # = suite.results.stats.DEFAULT_MIN_SEEDS (not imported here: `trainbench --help` stays instant)

results_app = typer.Typer(help="The results folder: validate and show result files.", no_args_is_help=True)
baseline_app = typer.Typer(help="Blessed baselines that pull requests are compared against.", no_args_is_help=True)


# ---- results ---------------------------------------------------------------------------------------------


@results_app.command("validate")
def results_validate(path: Annotated[Path, typer.Argument(help="a results folder or file")] = Path("results")):
    """Check every result file, loose or packed by `results archive`; names each bad one, exits 1 if any is bad."""
    from suite.results.index import archive
    from suite.results.record import load_results

    if not path.exists():
        raise fail_input(f"{path}: no such file or folder")
    is_zip = path.is_file() and path.suffix == ".zip"
    loaded = load_results(path) if not is_zip else None
    errors = list(loaded.errors) if loaded else []
    valid = len(loaded.results) if loaded else 0
    zips = [path] if is_zip else archive.archives(path) if path.is_dir() else []
    packed = 0
    for arch in zips:  # the archived results are results too (they were reported as "0 valid, 0 invalid")
        try:
            for _, result, error in archive.read_members(arch, arch.parent if is_zip else path):
                packed += 1
                valid += result is not None
                errors += [error] if error else []
        except archive.ArchiveError as e:
            errors.append(str(e))
    for e in errors:
        err.print(f"[red]bad[/red] {escape(e)}", highlight=False)
    where = f", {packed} of them in {len(zips)} archive(s)" if zips else ""
    out.print(f"{valid} valid, {len(errors)} invalid result file(s) under {path}{where}", markup=False,
              highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_FAIL if errors else EXIT_OK)


@results_app.command("show")
def results_show(
    path: Annotated[Path, typer.Argument(help="a results folder or file")] = Path("results"),
    json_: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """A table of the results under PATH (newest last)."""
    if not path.exists():
        raise fail_input(f"{path}: no such file or folder")
    loaded = _load(path)
    items = sorted(loaded.results, key=lambda pr: pr[1].started_at)
    if json_:
        emit_json([{"path": str(p), **r.model_dump(mode="json", exclude={"config", "eval_curve"})} for p, r in items])
    else:
        table = Table(title=f"results under {escape(str(path))}")
        for col in ("started", "hardware", "workload", "backend", "seed", "status", "TTA s", "steps", "samples/s"):
            table.add_column(col)
        for _, r in items:
            sps = r.throughput.get("samples_per_s")
            table.add_row(
                r.started_at.strftime("%Y-%m-%d %H:%M"), escape(r.hardware.slug), escape(r.workload),
                escape(r.backend), str(r.seed), r.status, f"{r.time_to_target_s:.2f}" if r.time_to_target_s is not None else "-", str(r.steps),
                f"{sps:,.0f}" if sps else "-",
            )
        out.print(table)
    for e in loaded.errors:
        err.print(f"[red]skipped bad file[/red] {escape(e)}", highlight=False)




def _load(path: Path):  # noqa: ANN202 - results.Loaded or index.Indexed: both give .results and .errors
    """The results under PATH: through the index for a folder (updated first), else the file itself."""
    from suite.results import index
    from suite.results.record import load_results

    if index.enabled(path):  # updated, or warned (once, as every reader warns) and the files are read
        return index.load(path, refresh=False)
    return load_results(path)


def _results_dir(path: Path) -> Path:
    if not path.is_dir():
        raise fail_input(f"--results {path}: no such folder (the results folder, e.g. results/)")
    return path


@results_app.command("index")
def results_index(
    results: Annotated[Path, typer.Option("--results", help="the results folder")] = Path("results"),
    json_: Annotated[bool, typer.Option("--json")] = False,
    rescan: Annotated[bool, typer.Option(help="stat every file (after editing a result in place), not only "
                                              "those in folders whose mtime changed")] = False,
) -> None:
    """Bring the results index (RESULTS/.index/results.duckdb) up to date: reads only new or changed files."""
    from suite.results import index
    from suite.results.index import store as index_store

    root = _results_dir(results)
    try:
        report = index_store.update(root, rescan=rescan)
    except index_store.IndexStoreError as e:
        raise fail_input(str(e)) from None
    if json_:
        emit_json({"db": str(report.db), "read": report.read, "removed": report.removed, "runs": report.runs,
                   "bad_files": report.errors, "rebuilt": report.rebuilt, "seconds": round(report.seconds, 3),
                   "phases_s": report.phases_s})
    else:
        if report.rebuilt and report.rebuilt != "new":
            err.print(f"[yellow]rebuilt:[/yellow] {escape(report.rebuilt)}", highlight=False)
        out.print(f"indexed {report.read} new or changed file(s), dropped {report.removed}; {report.runs} runs, "
                  f"{report.errors} bad file(s) in {report.db} ({report.seconds:.2f} s)", highlight=False, soft_wrap=True)
    for msg in index.bad_files(root, refresh=False):
        err.print(f"skipped bad file {msg}", markup=False, highlight=False, soft_wrap=True)


def _date(text: str) -> datetime:
    try:
        d = datetime.fromisoformat(text)
    except ValueError:
        raise fail_input(f"--before {text!r}: not a date; give YYYY-MM-DD (UTC), e.g. --before 2026-01-01") from None
    return d if d.tzinfo else d.replace(tzinfo=UTC)


@results_app.command("archive")
def results_archive(
    before: Annotated[str, typer.Option("--before", help="archive results started before this UTC date (YYYY-MM-DD)")],
    results: Annotated[Path, typer.Option("--results", help="the results folder")] = Path("results"),
) -> None:
    """Pack result files (and their MLLOG logs) started before DATE into RESULTS/archive/YYYY-MM.zip, one per
    month; the index and every reader still read them. Each archive is verified before a file is deleted."""
    from suite.results.index import archive as index_archive
    from suite.results.index import pack as index_pack
    from suite.results.index import store as index_store

    root = _results_dir(results)
    cutoff = _date(before)
    try:
        report = index_pack.pack(root, cutoff)
    except (index_archive.ArchiveError, index_store.IndexStoreError, OSError) as e:
        raise fail_input(f"archive failed, no result file was deleted: {e}") from None
    for name, n in report.archives.items():
        out.print(f"{root / name}: +{n} file(s)", highlight=False, soft_wrap=True)
    out.print(f"archived {report.results} result(s) and {report.logs} log(s) started before {cutoff.date()}",
              highlight=False)
    for rel in report.left_loose:
        err.print(f"left loose (bad result file, fix or remove it): {root / rel}", markup=False, highlight=False)


def compare(
    baseline: Annotated[list[Path], typer.Option("--baseline", "-b", help="baseline files/folder, or a results folder, "
                                                 "or mlperf:SUBMITTER/SYSTEM (a published system `results "
                                                 "import-mlperf` recorded under --published)")],
    candidate: Annotated[list[Path], typer.Option("--candidate", "-c", help="the candidate's results folder")],
    format_: Annotated[str, typer.Option("--format", help="md (for a PR comment) or json")] = "md",
    out_file: Annotated[Path | None, typer.Option("--out", help="write the report here instead of stdout")] = None,
    json_out: Annotated[Path | None, typer.Option("--json-out", help="also write the JSON report here")] = None,
    alpha: Annotated[float, typer.Option(help="level of the two-sided test, per metric")] = 0.05,
    noise_floor: Annotated[float, typer.Option(help="relative change ignored where the spec sets none")] = 0.05,
    min_seeds: Annotated[int, typer.Option(help="fewest runs per side to compare at all (4: with 3 + 3 no change "
                                            "can reach alpha 0.05)")] = MIN_SEEDS,
    gate: Annotated[str | None, typer.Option(help="comma-separated metrics whose regression fails (exit 1)")] = None,
    strict: Annotated[bool, typer.Option(help="a bad result file is an error (exit 2), not skipped")] = False,
    validate: Annotated[bool, typer.Option(help="validate every file against the full Result schema (slower)")] = False,
    floors: Annotated[list[Path] | None, typer.Option(
        "--floors", help="folder/file of A/A-measured noise floors (`trainbench calibrate`), e.g. baselines/")] = None,
    throughput_noise_floor: Annotated[float, typer.Option(
        help="throughput A/B: relative change ignored where no floor was measured")] = 0.01,
    min_runs: Annotated[int, typer.Option(help="throughput A/B: fewest runs per side")] = 4,
    min_steps: Annotated[int, typer.Option(help="throughput A/B: fewest measured steps per run")] = 20,
    published: Annotated[Path, typer.Option("--published", help="the results folder holding imported (published) "
                                            "systems, for --baseline mlperf:...")] = Path("results"),
) -> None:
    """Compare candidate runs against baselines. Exit 0: no regression; 1: a regression; 2: bad input or
    nothing comparable."""
    from suite.compare import model as compare_model
    from suite.compare import output as compare_output
    from suite.compare import tta as cmp

    if format_ not in ("md", "json"):
        raise fail_input(f"--format {format_!r}: expected md or json")
    named = [str(b) for b in baseline if str(b).startswith("mlperf:")]
    if named and len(baseline) > 1:
        raise fail_input(f"--baseline {named[0]}: a published system is compared alone; give one --baseline")
    for b in ([] if named else baseline):
        for c in candidate:
            rb, rc = b.resolve(), c.resolve()
            if rb == rc or rb in rc.parents or rc in rb.parents:
                raise fail_input(f"--baseline {b} and --candidate {c} overlap: the runs under "
                                 f"{max(rb, rc, key=lambda x: len(x.parts))} would be counted on both sides; give "
                                 "each side its own folder (e.g. ab/base and ab/head)")
    try:
        settings = compare_model.Settings(alpha=alpha, default_noise_floor=noise_floor, min_seeds=min_seeds,
                                gate=tuple(g.strip() for g in gate.split(",") if g.strip()) if gate else compare_model.DEFAULT_GATE,
                                throughput_noise_floor=throughput_noise_floor, min_runs=min_runs, min_steps=min_steps)
        if named:
            from suite.compare.published import compare_published

            report = compare_published(named[0], published, candidate, settings, strict=strict)
        else:
            report = cmp.compare(baseline, candidate, settings, strict=strict, validate=validate, floors=floors)
    except ValueError as e:  # ResultError is a ValueError: a missing path, or a bad file under --strict
        raise fail_input(str(e)) from None
    as_json = json.dumps(compare_output.to_json(report), indent=2) + "\n" if format_ == "json" or json_out else ""
    text = as_json if format_ == "json" else compare_output.to_markdown(report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(as_json, encoding="utf-8")
    if out_file is None:
        sys.stdout.write(text)
        sys.stdout.flush()  # a closed pipe raises here, where never_exit_1 sees it, not at the interpreter's exit
    else:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(text, encoding="utf-8")
    for problem in report.errors:  # no markup: messages quote JSON paths such as `$.runs[0]`
        err.print(f"skipped bad file {problem}", markup=False, highlight=False, soft_wrap=True)
    for line in report.left_out:
        err.print(f"left out {line}", markup=False, highlight=False, soft_wrap=True)
    err.print(compare_output.summary_line(report).replace("**", ""), markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(report.exit_code)


@baseline_app.command("promote")
def baseline_promote(
    results: Annotated[list[Path], typer.Argument(help="result files or folders to bless")],
    to: Annotated[Path, typer.Option("--to", help="baselines folder")] = Path("baselines"),
    hardware: Annotated[str | None, typer.Option(help="only results of this hardware slug")] = None,
    spec_hash: Annotated[str | None, typer.Option(help="only results of this spec hash")] = None,
    min_seeds: Annotated[int, typer.Option(min=1, help="fewest seeds a baseline may have")] = MIN_SEEDS,
    replace: Annotated[bool, typer.Option(help="replace existing baseline files")] = False,
    imported: Annotated[str | None, typer.Option(
        "--imported", help="bless this imported (published) system, SUBMITTER/SYSTEM as `results import-mlperf` "
        "recorded it; imported results are otherwise always left out")] = None,
) -> None:
    """Aggregate results (several seeds of one spec on one hardware) into baseline files."""
    from suite.results import baselines as bl

    try:
        loaded = bl.load_paths(results, strict=False, validate=True)
    except ValueError as e:
        raise fail_input(str(e)) from None
    problems = list(loaded.errors) + [f"{src}: is a baseline file, not a result" for src, _ in loaded.baselines]
    if problems:
        raise fail_input("refusing to promote; fix or leave out these files:\n  " + "\n  ".join(problems))
    published = [r for r in loaded.records if r.imported_system is not None]
    if imported is not None and not any(r.imported_system == imported for r in published):
        known = sorted({str(r.imported_system) for r in published})
        raise fail_input(f"--imported {imported}: no imported results of that system under "
                         f"{', '.join(map(str, results))}" + (f" (imported: {', '.join(known[:10])})" if known else ""))
    if published and imported is None:
        err.print(f"left out {len(published)} imported (published) result(s), e.g. {published[0].source}: a published "
                  "system is blessed only when named (--imported SUBMITTER/SYSTEM)", markup=False, highlight=False,
                  soft_wrap=True)
    records = [r for r in loaded.records if (hardware is None or r.key.hardware == hardware)
               and (spec_hash is None or r.spec_hash == spec_hash)
               and (r.imported_system is None if imported is None else r.imported_system == imported)]
    if not records:
        raise fail_input(f"no result files under {', '.join(map(str, results))} match"
                         + (f" --hardware {hardware}" if hardware else "") + (f" --spec-hash {spec_hash}" if spec_hash else ""))
    if thr := bl.throughput_records(records):
        if len(thr) == len(records):
            raise fail_input(f"{', '.join(map(str, results))}: only throughput results ({len(thr)}, e.g. "
                             f"{thr[0].source}); {bl.THROUGHPUT_NOT_A_BASELINE}")
        err.print(f"left out {len(thr)} throughput result(s), e.g. {thr[0].source}: {bl.THROUGHPUT_NOT_A_BASELINE}",
                  markup=False, highlight=False, soft_wrap=True)
        records = [r for r in records if r.mode != "throughput"]
    try:
        built = bl.build_baselines(records, min_seeds=min_seeds, promoted_by_git_sha=bl.checkout_sha())
        existing = [bl.baseline_path(to, b) for b in built if bl.baseline_path(to, b).exists()]
        if existing and not replace:
            raise bl.PromoteError(f"{', '.join(map(str, existing))} exist(s); pass --replace to bless the new runs "
                                  "(git keeps the old baseline)")
        for b in built:
            path = bl.write_baseline(to, b, replace=replace)
            tta = b.aggregate.tta_olympic_s
            out.print(f"wrote {path}: {b.aggregate.runs} seeds, {b.aggregate.reached} reached, time to target "
                      f"{'inf' if tta is None else f'{tta:.3f} s'} (olympic mean), spec {b.spec_hash}", highlight=False,
                      soft_wrap=True, markup=False)
    except bl.PromoteError as e:
        raise fail_input(str(e)) from None


@baseline_app.command("rcp")
def baseline_rcp(
    baselines: Annotated[list[Path], typer.Argument(help="baseline files or folders to make RCPs from")],
    to: Annotated[Path, typer.Option("--to", help="baselines folder the RCP files are written into")] = Path("baselines"),
    global_batch_size: Annotated[int | None, typer.Option(
        min=1, help="samples per optimizer step over all ranks (default: data.batch_size of the workload's spec, "
        "when its spec hash is the baseline's)")] = None,
    min_seeds: Annotated[int, typer.Option(min=3, help="fewest reached seeds an RCP may have")] = 8,
) -> None:
    """Make Reference Convergence Points (MLPerf's RCPs: samples to target per seed at one global batch size) from
    blessed baselines; written beside them, append-only, and used by compare's convergence guard."""
    from suite.results import baseline_schema
    from suite.results import baselines as bl
    from suite.results import rcp as rcp_mod

    found: list[tuple[Path, baseline_schema.Baseline]] = []
    for root in baselines:
        if not root.exists():
            raise fail_input(f"{root}: no such file or folder")
        got, errors = bl.load_baselines(root)
        if errors:
            raise fail_input("not baseline files; fix or leave them out:\n  " + "\n  ".join(errors))
        found += got
    if not found:
        raise fail_input(f"no baseline files under {', '.join(map(str, baselines))} (`trainbench baseline promote`)")
    sha = bl.checkout_sha()
    for path, b in found:
        bs = _rcp_batch_size(b, path, global_batch_size)
        try:
            r = rcp_mod.build_rcp(b, str(path), bs, min_seeds=min_seeds, git_sha=sha)
            written = rcp_mod.write_rcp(to, r)
        except rcp_mod.RCPError as e:
            raise fail_input(str(e)) from None
        out.print(f"wrote {written}: {len(r.seeds)} seeds, global batch {bs}, samples to target "
                  f"{min(r.samples_to_target)}..{max(r.samples_to_target)}", highlight=False, soft_wrap=True, markup=False)


def _rcp_batch_size(b, path: Path, flag: int | None) -> int:  # noqa: ANN001 - a suite.results.baselines.Baseline
    """The global batch size of an RCP comes from the baseline's own result files (data.batch_size as recorded); a
    --global-batch-size that contradicts them is refused (issue 50 item 7: it would scale samples to target wrongly
    in an append-only file). The flag, else the spec, only where no result file can be read."""
    from suite.compare.rcp_guard import batch_size_of

    recorded = {f: batch_size_of(f) for f in b.provenance.result_files}
    sizes = {v for v in recorded.values() if v is not None}
    if len(sizes) > 1:
        raise fail_input(f"{path}: its runs were recorded at different batch sizes ({sorted(sizes)}); an RCP is of "
                         "one global batch size")
    if sizes:
        (size,) = sizes
        if flag is not None and flag != size:
            example = next(f for f, v in recorded.items() if v == size)
            raise fail_input(f"--global-batch-size {flag} contradicts {path}: its runs were recorded at data.batch_size "
                             f"{size} (e.g. {example}); leave the flag out (the batch size comes from the results)")
        return int(size)
    return flag or _spec_batch_size(b)


def _spec_batch_size(b) -> int:  # noqa: ANN001 - a suite.results.baselines.Baseline
    """data.batch_size of the workload's current spec, refused (naming the flag) when its hash is not the baseline's."""
    from suite import registry
    from suite.specload import load_spec

    try:
        spec = load_spec(registry.find_workload(b.workload))
    except Exception as e:  # noqa: BLE001 - any failure to find or read the spec is the same advice
        raise fail_input(f"{b.workload}: cannot read its spec for the global batch size ({e}); pass "
                         "--global-batch-size") from None
    if spec.spec_hash() != b.spec_hash:
        raise fail_input(f"{b.workload}: the spec changed since the baseline (hash {spec.spec_hash()}, baseline "
                         f"{b.spec_hash}); pass --global-batch-size of the baseline's runs")
    return int(spec.data.batch_size)


def register(app: typer.Typer) -> None:
    from suite.cli import mlperf

    mlperf.register(results_app)
    app.add_typer(results_app, name="results")
    app.command()(never_exit_1(compare))
    app.add_typer(baseline_app, name="baseline")
