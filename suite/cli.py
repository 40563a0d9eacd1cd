"""The `trainbench` command line: a thin typer app over the harness, results, compare and site modules.

Exit codes: 0 success; 1 a run ended badly (error, diverged, interrupted) or a check found a problem;
2 bad input (unknown workload, invalid spec or flag, missing data). Heavy imports happen inside commands
so that `trainbench --help` is instant.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    name="trainbench",
    help="Benchmark deep-learning training: time-to-accuracy and MFU, compared against baselines.\n\n"
    "Start with `trainbench list`, then `trainbench run cv/digits_cnn`. Results land in results/.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
spec_app = typer.Typer(help="Workload specs: JSON Schema for editors, validation.", no_args_is_help=True)
results_app = typer.Typer(help="The results folder: validate and show result files.", no_args_is_help=True)
app.add_typer(spec_app, name="spec")
app.add_typer(results_app, name="results")

out = Console()
err = Console(stderr=True)

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2


def fail_input(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", markup=True, highlight=False)
    return typer.Exit(EXIT_INPUT)


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


# ---- run -------------------------------------------------------------------------------------------------


def _resolve_workloads(names: list[str], tier: str | None) -> list[Path]:
    from suite import registry
    from suite.spec import TIERS, SpecError, load_spec

    if tier is not None and tier not in TIERS:
        raise fail_input(f"--tier {tier!r}: expected one of {', '.join(TIERS)}")
    if names:
        try:
            return [registry.find_workload(n) for n in names]
        except registry.RegistryError as e:
            raise fail_input(str(e)) from None
    if tier is None:
        raise fail_input("name a workload (e.g. `trainbench run cv/digits_cnn`) or a tier (`--tier smoke`)")
    paths = []
    for _, path in registry.workload_files().items():
        try:
            if tier in load_spec(path).tiers:
                paths.append(path)
        except SpecError as e:
            raise fail_input(str(e)) from None
    if not paths:
        raise fail_input(f"no workload is in tier {tier!r}")
    return paths


def _progress_printer(enabled: bool):
    """Live progress on stderr: a line at init, at most one a second while training, one at the end."""
    import time

    from suite.harness import Progress

    last = [0.0]

    def show(p: Progress) -> None:
        if not enabled:
            return
        head = f"[{p.workload} seed {p.seed}]"
        now = time.monotonic()
        if p.event == "init":
            err.print(f"{head} init ...", highlight=False, markup=False)
        elif p.event in ("step", "eval"):
            if now - last[0] < 1.0:
                return
            last[0] = now
            line = f"{head} step {p.step:>6}  {p.elapsed_s:7.1f}s"
            if p.loss is not None:
                line += f"  loss {p.loss:.4f}"
            if p.event == "eval" and p.metric is not None:
                line += f"  eval {p.metric:.4f} (target {p.target})"
            err.print(line, highlight=False, markup=False)
        elif p.event == "stop":
            err.print(f"{head} {p.status} after {p.step} steps, {p.elapsed_s:.1f}s", highlight=False, markup=False)

    return show


def _summary_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="TrainBench runs")
    for col in ("workload", "backend", "seed", "status", "time to target", "steps", "samples/s", "final"):
        table.add_column(col, overflow="fold", no_wrap=col in ("workload", "status"))
    for r in rows:
        tta = f"{r['time_to_target_s']:.2f} s" if r["time_to_target_s"] is not None else "-"
        sps = r["throughput"].get("samples_per_s")
        final = " ".join(f"{k}={v:.4g}" for k, v in r["final_metrics"].items())
        colour = {"reached": "green", "budget": "yellow"}.get(r["status"], "red")
        table.add_row(
            r["workload"], r["backend"], str(r["seed"]), f"[{colour}]{r['status']}[/{colour}]", tta,
            str(r["steps"]), f"{sps:,.0f}" if sps else "-", final,
        )
    return table


def _torchrun(nproc: int) -> int:
    """Re-run this very command under torchrun with `nproc` processes (the workers see WORLD_SIZE)."""
    argv = [a for a in sys.argv[1:]]
    cleaned: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = True
            continue
        if a.startswith("--nproc="):
            continue
        cleaned.append(a)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "suite.cli", *cleaned]
    return subprocess.call(cmd, env={**os.environ, "TRAINBENCH_LAUNCHED": "1"})


@app.command()
def run(
    workloads: Annotated[list[str] | None, typer.Argument(help="names (cv/digits_cnn) or spec paths")] = None,
    tier: Annotated[str | None, typer.Option(help="run every workload of a tier: smoke | standard | full")] = None,
    backend: Annotated[str, typer.Option(help="torch | deepspeed | megatron | npu")] = "torch",
    seeds: Annotated[int, typer.Option(min=1, help="number of seeds, run one after another")] = 1,
    seed: Annotated[int, typer.Option(help="first seed")] = 0,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a spec field: --set optimizer.lr=0.01")] = None,
    variant: Annotated[str | None, typer.Option(help="a named override set from the spec, e.g. tiny")] = None,
    precision: Annotated[str, typer.Option(help="fp32 | bf16 | fp16")] = "fp32",
    compile_: Annotated[bool, typer.Option("--compile", help="torch.compile the model")] = False,
    threads: Annotated[int | None, typer.Option(help="torch threads per process (default: cores / processes)")] = None,
    nproc: Annotated[int, typer.Option(min=1, help="processes on this machine (torchrun, data parallel)")] = 1,
    results: Annotated[Path, typer.Option(help="results folder")] = Path("results"),
    json_: Annotated[bool, typer.Option("--json", help="print the results as JSON on stdout")] = False,
    quiet: Annotated[bool, typer.Option(help="no progress lines")] = False,
    fail_fast: Annotated[bool, typer.Option(help="stop at the first run that ends in error or divergence")] = False,
) -> None:
    """Run workloads and record one result per seed. Progress goes to stderr, the summary to stdout."""
    if nproc > 1 and "WORLD_SIZE" not in os.environ:
        raise typer.Exit(_torchrun(nproc))
    from suite import distributed, harness
    from suite.data.base import DataMissing
    from suite.spec import SpecError, load_spec, parse_override

    if precision not in ("fp32", "bf16", "fp16"):
        raise fail_input(f"--precision {precision!r}: expected fp32, bf16 or fp16")
    try:
        overrides = dict(parse_override(s) for s in (set_ or []))
    except SpecError as e:
        raise fail_input(str(e)) from None
    paths = _resolve_workloads(workloads or [], tier)
    specs = []
    for path in paths:
        try:
            specs.append((path, load_spec(path, overrides, variant)))
        except SpecError as e:
            raise fail_input(str(e)) from None
    from suite import registry

    try:
        registry.backend_class(backend)
    except registry.RegistryError as e:
        raise fail_input(f"--backend: {e}") from None

    is_main = distributed.from_env().is_main
    show = _progress_printer(is_main and not quiet)
    rows: list[dict[str, Any]] = []
    bad = False
    for path, spec in specs:
        for s in range(seed, seed + seeds):
            req = harness.RunRequest(
                spec=spec, backend=backend, seed=s, precision=precision, compile=compile_, threads=threads,
                results_dir=results, tier=tier, overrides=overrides, variant=variant, spec_source=str(path),
            )
            try:
                result, written = harness.run(req, show)
            except DataMissing as e:
                raise fail_input(str(e)) from None
            row = result.model_dump(mode="json", include={
                "workload", "backend", "seed", "status", "time_to_target_s", "steps", "train_s", "throughput",
                "final_metrics", "error", "run_id", "mfu"})
            row["path"] = str(written) if written else None
            rows.append(row)
            if result.status in ("error", "diverged", "interrupted"):
                bad = True
                if is_main and result.error and not quiet:
                    err.print(f"[red]{result.workload} seed {s}: {result.status}[/red]: {result.error}",
                              highlight=False)
                if fail_fast or result.status == "interrupted":
                    break
        else:
            continue
        break
    if is_main:
        if json_:
            _emit_json(rows)
        else:
            out.print(_summary_table(rows))
            out.print(f"results written under {results}/")
    raise typer.Exit(EXIT_FAIL if bad else EXIT_OK)


# ---- list / env ------------------------------------------------------------------------------------------


@app.command("list")
def list_(
    tier: Annotated[str | None, typer.Option(help="only this tier")] = None,
    json_: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The workloads under workloads/, with domain, tiers, target and budget."""
    from suite import registry
    from suite.spec import SpecError, load_spec

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
            "backends": sorted({"torch", *spec.backends}),
        })
    if json_:
        _emit_json(rows)
    else:
        table = Table(title=f"Workloads ({registry.root_hint()})")
        for col in ("name", "domain", "tiers", "target", "budget", "backends"):
            table.add_column(col)
        for r in rows:
            table.add_row(r["name"], r["domain"], ",".join(r["tiers"]), r["target"], f"{r['budget_s']:.0f} s",
                          ",".join(r["backends"]))
        out.print(table)
    for p in problems:
        err.print(f"[red]invalid spec[/red] {p}", highlight=False)
    raise typer.Exit(EXIT_FAIL if problems else EXIT_OK)


@app.command()
def env(json_: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Hardware and software fingerprint, and which backends can run here (and why not)."""
    from suite import devices, environment, registry

    device = devices.current()
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
        _emit_json(info)
        return
    hw = info["hardware"]
    out.print(f"[bold]hardware[/bold] {hw['slug']}: {hw['device_name']} x{hw['device_count']} "
              f"({hw['cpu_model']}, {hw['cpu_cores']} cores)")
    out.print("[bold]software[/bold] " + ", ".join(f"{k} {v}" for k, v in info["software"].items()))
    table = Table(title="backends")
    for col in ("backend", "available", "version", "why not"):
        table.add_column(col)
    for name, b in info["backends"].items():
        table.add_row(name, "yes" if b["available"] else "no", b["version"] or "-", b["reason"] or "")
    out.print(table)


# ---- spec ------------------------------------------------------------------------------------------------


@spec_app.command("schema")
def spec_schema(out_file: Annotated[Path | None, typer.Option("--out", help="write here instead of stdout")] = None):
    """The JSON Schema of a workload spec (point your editor's YAML plugin at it)."""
    from suite.spec import json_schema

    text = json.dumps(json_schema(), indent=2)
    if out_file:
        out_file.write_text(text + "\n", encoding="utf-8")
        err.print(f"wrote {out_file}")
    else:
        sys.stdout.write(text + "\n")


@spec_app.command("validate")
def spec_validate(paths: Annotated[list[Path], typer.Argument(help="spec files")]) -> None:
    """Validate spec files; prints each problem with file and field, exits 2 if any is invalid."""
    from suite.spec import SpecError, load_spec

    bad = 0
    for p in paths:
        try:
            spec = load_spec(p)
            out.print(f"ok {p} ({spec.name}, hash {spec.spec_hash()})", highlight=False)
        except SpecError as e:
            bad += 1
            err.print(str(e), highlight=False)
    raise typer.Exit(EXIT_INPUT if bad else EXIT_OK)


# ---- results ---------------------------------------------------------------------------------------------


@results_app.command("validate")
def results_validate(path: Annotated[Path, typer.Argument(help="a results folder or file")] = Path("results")):
    """Check every result file; names each bad one and exits 1 if any is bad."""
    from suite.results import load_results

    if not path.exists():
        raise fail_input(f"{path}: no such file or folder")
    loaded = load_results(path)
    for e in loaded.errors:
        err.print(f"[red]bad[/red] {e}", highlight=False)
    out.print(f"{len(loaded.results)} valid, {len(loaded.errors)} invalid result file(s) under {path}")
    raise typer.Exit(EXIT_FAIL if loaded.errors else EXIT_OK)


@results_app.command("show")
def results_show(
    path: Annotated[Path, typer.Argument(help="a results folder or file")] = Path("results"),
    json_: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """A table of the results under PATH (newest last)."""
    from suite.results import load_results

    if not path.exists():
        raise fail_input(f"{path}: no such file or folder")
    loaded = load_results(path)
    items = sorted(loaded.results, key=lambda pr: pr[1].started_at)
    if json_:
        _emit_json([{"path": str(p), **r.model_dump(mode="json", exclude={"config", "eval_curve"})} for p, r in items])
    else:
        table = Table(title=f"results under {path}")
        for col in ("started", "hardware", "workload", "backend", "seed", "status", "TTA s", "steps", "samples/s"):
            table.add_column(col)
        for _, r in items:
            sps = r.throughput.get("samples_per_s")
            table.add_row(
                r.started_at.strftime("%Y-%m-%d %H:%M"), r.hardware.slug, r.workload, r.backend, str(r.seed),
                r.status, f"{r.time_to_target_s:.2f}" if r.time_to_target_s is not None else "-", str(r.steps),
                f"{sps:,.0f}" if sps else "-",
            )
        out.print(table)
    for e in loaded.errors:
        err.print(f"[red]skipped bad file[/red] {e}", highlight=False)

# ---- data: list / prepare ------------------------------------------------------------------------------

data_app = typer.Typer(help="Data sets: which are here, and getting or indexing one.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("list")
def data_list(json_: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every data set the workloads use, where it comes from, and whether this machine has it."""
    from suite.data.prepare import listing

    rows = listing()
    if json_:
        _emit_json(rows)
        return
    table = Table(title="Data sets ($TRAINBENCH_DATA)")
    for col in ("name", "source", "origin", "here", "where / how to get it"):
        table.add_column(col)
    for r in rows:
        how = f"trainbench data prepare {r['name']}" + (" --from PATH" if r["source"] == "local" else "")
        table.add_row(r["name"], r["source"], r["origin"], "yes" if r["present"] else "no",
                      r["where"] if r["present"] else how)
    out.print(table)


@data_app.command("prepare")
def data_prepare(
    name: Annotated[str, typer.Argument(help="a data set name from `trainbench data list`")],
    from_: Annotated[Path | None, typer.Option("--from", help="a local copy to check, index and link")] = None,
) -> None:
    """Install a registry data set, or check and index a local copy (--from), or download where possible."""
    from suite.data.base import DataMissing
    from suite.data.prepare import prepare

    if from_ is not None and not from_.exists():
        raise fail_input(f"--from {from_}: no such file or folder")
    try:
        out.print(prepare(name, from_), highlight=False)
    except KeyError as e:
        raise fail_input(str(e.args[0])) from None
    except (DataMissing, FileExistsError) as e:
        raise fail_input(str(e)) from None


def main() -> None:
    app()


if __name__ == "__main__":
    main()
