"""What is here: `list` (workloads, support matrix), `env` (fingerprint, peaks), `spec`, `data`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from suite.cli.common import EXIT_FAIL, EXIT_INPUT, EXIT_OK, emit_json, err, fail_input, out

spec_app = typer.Typer(help="Workload specs: JSON Schema for editors, validation.", no_args_is_help=True)
data_app = typer.Typer(help="Data sets: which are here, and getting or indexing one.", no_args_is_help=True)


# ---- list / env ------------------------------------------------------------------------------------------


def list_(
    tier: Annotated[str | None, typer.Option(help="only this tier")] = None,
    json_: Annotated[bool, typer.Option("--json")] = False,
    matrix: Annotated[bool, typer.Option("--matrix", help="which workload x backend pairs are supported")] = False,
    why: Annotated[bool, typer.Option("--why", help="with --matrix: the reason of every refused pair and layout")] = False,
) -> None:
    """The workloads under workloads/, with domain, tiers, target and budget (`spec validate` checks each whole)."""
    from suite import registry
    from suite.spec import SpecError
    from suite.specload import load_spec_schema as load_spec  # no torch: `list` answers at once

    if matrix:
        raise typer.Exit(_print_matrix(tier, json_, why=why))

    rows, problems = [], []
    for name, path in registry.workload_files().items():
        try:
            spec = load_spec(path)
        except SpecError as e:
            problems.append(str(e))
            continue
        if tier and tier not in spec.tiers:
            continue
        t = spec.target
        rows.append({
            "name": name, "domain": spec.domain, "tiers": sorted(spec.tiers),
            "target": f"{t.metric} {'>=' if t.mode == 'max' else '<='} {t.value}",
            "budget_s": spec.budget.max_train_s, "description": spec.description,
        })
    if json_:
        # the backends of each workload are the support matrix's (the spec's `backends:` blocks are options, not
        # support); reading it imports the backends, so only --json (for scripts) pays for it
        from suite.backends.matrix import load_all
        from suite.backends.matrix import matrix as support_matrix

        specs, _ = load_all({r["name"]: registry.workload_files()[r["name"]] for r in rows})
        grid = support_matrix(specs)
        for r in rows:
            r["backends"] = [b for b, reason in grid.get(r["name"], {}).items() if reason is None]
        emit_json(rows)
    else:
        table = Table(title=escape(f"Workloads ({registry.root_hint()})"))
        for col in ("name", "domain", "tiers", "target", "budget"):
            table.add_column(col)
        for r in rows:
            table.add_row(r["name"], r["domain"], ",".join(r["tiers"]), r["target"], f"{r['budget_s']:.0f} s")
        out.print(table)
        out.print("which backends run each workload: `trainbench list --matrix` (the registry's support matrix)",
                  markup=False, highlight=False)
    for p in problems:
        err.print(f"[red]invalid spec[/red] {escape(p)}", highlight=False)
    raise typer.Exit(EXIT_FAIL if problems else EXIT_OK)


def env(
    json_: Annotated[bool, typer.Option("--json")] = False,
    peak: Annotated[bool, typer.Option("--peak", help="also the table peak and a measured GEMM peak")] = False,
    precision: Annotated[str, typer.Option(help="dtype for --peak: fp32 | bf16 | fp16")] = "fp32",
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads for --peak on CPU (default: all cores)")] = None,
) -> None:
    """Hardware and software fingerprint, and which backends can run here (and why not)."""
    from suite import devices, registry
    from suite.measure import environment

    device = devices.current()
    if peak:
        _env_peak(device, precision, threads, json_)
        return
    info: dict[str, Any] = {
        "hardware": environment.hardware(device, device.count()).model_dump(),
        "software": environment.software(),
        "git": environment.git_info().model_dump(),
        "backends": {},
    }
    for name in registry.BACKENDS:
        try:
            avail = registry.backend_class(name)(device).available()
            info["backends"][name] = {"available": avail.ok, "reason": avail.reason, "version": avail.version}
        except Exception as e:  # noqa: BLE001 - env must report, never crash
            info["backends"][name] = {"available": False, "reason": f"{type(e).__name__}: {e}", "version": None}
    if json_:
        emit_json(info)
        return
    hw = info["hardware"]
    out.print(f"[bold]hardware[/bold] {escape(hw['slug'])}: {escape(str(hw['device_name']))} x{hw['device_count']} "
              f"({escape(str(hw['cpu_model']))}, {hw['cpu_cores']} cores)", highlight=False)
    out.print("[bold]software[/bold] " + escape(", ".join(f"{k} {v}" for k, v in info["software"].items())),
              highlight=False)
    table = Table(title="backends")
    for col in ("backend", "available", "version", "why not"):
        table.add_column(col)
    for name, b in info["backends"].items():
        table.add_row(escape(name), "yes" if b["available"] else "no", escape(b["version"] or "-"),
                      escape(b["reason"] or ""))
    out.print(table)


# ---- peaks (env --peak) ----------------------------------------------------------------------------------


def _env_peak(device: Any, precision: str, threads: int | None, json_: bool) -> None:
    """Print the peak MFU would divide by (table / ISA) beside a measured GEMM peak, in one precision."""
    from suite import devices
    from suite.measure import peaks

    if precision not in ("fp32", "bf16", "fp16"):
        raise fail_input(f"--precision {precision!r}: expected fp32, bf16 or fp16")
    devices.set_threads(threads)
    device.set_current()
    from suite.cli.notes import host_load, peak_notes

    table, warnings = peaks.resolve(device.type, device.name(), precision)
    gemm = peaks.measure_gemm(device.torch, precision, budget_s=2.0)
    warnings = [*warnings, *peak_notes(gemm.flops_per_s, table.flops_per_s if table else None, *host_load())]
    info = {
        "device": device.name(), "device_type": device.type, "precision": precision,
        "dtype": peaks.matmul_dtype(device.type, precision),
        "table_flops_per_s": table.flops_per_s if table else None,
        "table_source": table.source if table else None, "provenance": table.provenance if table else None,
        "measured_flops_per_s": gemm.flops_per_s, "gemm_n": gemm.n, "gemm_repeats": gemm.repeats,
        "measured_over_table": gemm.flops_per_s / table.flops_per_s if table else None, "warnings": warnings,
    }
    if json_:
        emit_json(info)
        return
    tf = f"{table.flops_per_s / 1e12:.3f} TFLOP/s ({table.provenance}: {table.source})" if table else "unknown"
    out.print(f"[bold]device[/bold] {escape(str(info['device']))} ({device.type}), {info['dtype']}", highlight=False)
    out.print(f"[bold]peak[/bold] {escape(tf)}", highlight=False)
    ratio = f" = {info['measured_over_table']:.1%} of the peak" if table else ""
    out.print(f"[bold]measured[/bold] {gemm.flops_per_s / 1e12:.3f} TFLOP/s (GEMM {gemm.n}x{gemm.n}, "
              f"{gemm.repeats} matmuls){ratio}", highlight=False)
    for w in warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(w)}", highlight=False)


# ---- spec ------------------------------------------------------------------------------------------------


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



def _print_matrix(tier: str | None, json_: bool, results: Path = Path("results"), why: bool = False) -> int:
    from dataclasses import asdict

    from suite import registry
    from suite.backends.limits import classify
    from suite.backends.matrix import layout_matrix, load_all, matrix
    from suite.cli.notes import HARDWARE_UNTESTED, hardware_tested

    specs, problems = load_all(registry.workload_files())
    if tier:
        specs = {n: s for n, s in specs.items() if tier in s.tiers}
    grid = matrix(specs)
    tested = hardware_tested(results)
    lays = layout_matrix(specs)

    def untested(wl: str, b: str) -> bool:  # supported in code, never run on its hardware (no result here)
        return b in HARDWARE_UNTESTED and (wl, b) not in tested

    if json_:
        emit_json({wl: {b: {"supported": r is None, "reason": r, "layouts": lays[wl].get(b, {}),
                            **({"limit": asdict(classify(b, specs[wl]))} if r is not None else {}),
                            **({"tested_on_hardware": not untested(wl, b)} if b in HARDWARE_UNTESTED else {})}
                        for b, r in row.items()} for wl, row in grid.items()})
    else:
        table = Table(title="workload x backend (yes = supported; `trainbench env` says which are installed; "
                            "untested on hardware = supported in code, no result from that hardware under results/ yet)")
        table.add_column("workload")
        for b in registry.BACKENDS:
            table.add_column(b)
        for wl, row in grid.items():
            table.add_row(escape(wl), *(("[yellow]untested on hardware[/yellow]" if untested(wl, b) else "[green]yes[/green]")
                                        if r is None else "[red]no[/red]" for b, r in row.items()))
        out.print(table)
        refused = sum(r is not None for row in grid.values() for r in row.values())
        per_backend = ", ".join(f"{b} {sum(row[b] is None for row in grid.values())}" for b in registry.BACKENDS)
        layouts_refused = sum(r is not None for per in lays.values() for probes in per.values() for r in probes.values())
        out.print(f"{len(grid)} workloads; supported per backend: {per_backend}. {refused} pairs and {layouts_refused} "
                  "layouts refused: `--why` prints each reason (and the layouts table), `--json` holds them all",
                  markup=False, highlight=False)
        if not why:
            for p in problems:
                err.print(f"[red]invalid spec[/red] {escape(str(p))}", highlight=False)
            return EXIT_FAIL if problems else EXIT_OK
        for wl, row in grid.items():
            for b, r in row.items():
                if r is not None:  # the backend's words, then which kind of no (suite/backends/limits.py)
                    out.print(f"{wl} x {b}: {r} [{classify(b, specs[wl]).describe()}]", markup=False,
                              highlight=False, soft_wrap=True)
        for wl, spec in specs.items():  # what a workload needs beyond its backend (a data component's `requires`)
            needs = getattr(registry.data_component(spec.data.name), "requires", None)
            if needs is not None and (why := needs()) is not None:
                out.print(f"{wl} (any backend): {why}", markup=False, highlight=False, soft_wrap=True)
        layout_table = Table(title="layouts beyond data parallel (--parallel; the reasons follow)")
        layout_table.add_column("workload")
        layout_table.add_column("backend")
        layout_table.add_column("layouts")
        for wl, per_backend in lays.items():
            for b, probes in per_backend.items():
                shown = " ".join(f"[green]{escape(n)}[/green]" if r is None else f"[red]{escape(n)}[/red]"
                                 for n, r in probes.items())
                layout_table.add_row(escape(wl), escape(b), shown)
        out.print(layout_table)
        for wl, per_backend in lays.items():
            for b, probes in per_backend.items():
                for n, r in probes.items():
                    if r is not None:
                        out.print(f"{wl} x {b} x {n}: {r}", markup=False, highlight=False)
    for p in problems:
        err.print(f"[red]invalid spec[/red] {escape(str(p))}", highlight=False)
    return EXIT_FAIL if problems else EXIT_OK





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
    app.command("list")(list_)
    app.command()(env)
    app.add_typer(spec_app, name="spec")
    app.add_typer(data_app, name="data")
