"""`trainbench list`: the workloads under workloads/, and (--matrix) which workload x backend pairs run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from suite.cli.common import EXIT_FAIL, EXIT_OK, emit_json, err, out


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
        # support); each backend's `supports` reads the spec alone, in a module that imports no framework
        from suite.backends.matrix import load_all
        from suite.backends.matrix import matrix as support_matrix

        specs, _ = load_all({r["name"]: registry.workload_files()[r["name"]] for r in rows}, schema_only=True)
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


def _print_matrix(tier: str | None, json_: bool, results: Path = Path("results"), why: bool = False) -> int:
    from dataclasses import asdict

    from suite import registry
    from suite.backends.limits import classify
    from suite.backends.matrix import layout_matrix, load_all, matrix
    from suite.cli.notes import HARDWARE_UNTESTED, hardware_tested

    specs, problems = load_all(registry.workload_files(), schema_only=True)  # the matrix reads the spec's own fields
    if tier:
        specs = {n: s for n, s in specs.items() if tier in s.tiers}
    grid = matrix(specs)
    tested = hardware_tested(results)
    lays = layout_matrix(specs)

    def untested(wl: str, b: str) -> bool:  # supported in code, never run on its hardware (no result here)
        return b in HARDWARE_UNTESTED and (wl, b) not in tested

    def note(wl: str, b: str) -> str | None:  # the engine's word on a supported cell (its options module's `note`)
        said = registry.engine_attr(b, "note")
        return said(specs[wl]) if said is not None and grid[wl][b] is None else None

    if json_:
        emit_json({wl: {b: {"supported": r is None, "reason": r, "layouts": lays[wl].get(b, {}),
                            **({"limit": asdict(classify(b, specs[wl]))} if r is not None else {}),
                            **({"note": n} if (n := note(wl, b)) is not None else {}),
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
                elif (n := note(wl, b)) is not None:
                    out.print(f"{wl} x {b} (yes): {n}", markup=False, highlight=False, soft_wrap=True)
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


def register(app: typer.Typer) -> None:
    app.command("list")(list_)
