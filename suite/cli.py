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
from rich.markup import escape
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
err = Console(stderr=True, soft_wrap=True)  # never wrap an error message mid-field

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2


def fail_input(message: str) -> typer.Exit:
    # escape(): messages carry file names and run output, and `[/x]` in them would be read as rich markup
    err.print(f"[red]error:[/red] {escape(message)}", markup=True, highlight=False)
    return typer.Exit(EXIT_INPUT)


def _strict_json(data: Any) -> Any:
    """NaN/inf as the strings the result files use: a bare NaN token is not JSON (jq and browsers refuse it)."""
    if isinstance(data, float) and data != data:
        return "NaN"
    if isinstance(data, float) and data in (float("inf"), float("-inf")):
        return "Infinity" if data > 0 else "-Infinity"
    if isinstance(data, dict):
        return {k: _strict_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_strict_json(v) for v in data]
    return data


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(_strict_json(data), indent=2, default=str, allow_nan=False) + "\n")


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


def _row(result: Any, written: Path | None) -> dict[str, Any]:
    """One run as `run --json` prints it (and the summary table shows it)."""
    row = result.model_dump(mode="json", include={
        "workload", "backend", "seed", "status", "time_to_target_s", "steps", "train_s", "throughput",
        "final_metrics", "error", "run_id", "mfu"})
    target = result.config.get("spec", {}).get("target", {})
    row["target"] = {k: target.get(k) for k in ("metric", "value", "mode")} if target else None
    row["path"] = str(written) if written else None
    return row


def _summary_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="TrainBench runs")
    for col in ("workload", "backend", "seed", "status", "time to target", "steps", "samples/s", "last eval"):
        table.add_column(col, overflow="fold", no_wrap=col in ("workload", "status"))
    for r in rows:
        tta = f"{r['time_to_target_s']:.2f} s" if r["time_to_target_s"] is not None else "-"
        sps = r["throughput"].get("samples_per_s")
        metric = (r.get("target") or {}).get("metric")
        shown = {metric: r["final_metrics"][metric]} if metric in r["final_metrics"] else r["final_metrics"]
        final = escape(" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in shown.items()))
        if metric in r["final_metrics"]:
            t = r["target"]
            final += f" (target {'>=' if t['mode'] == 'max' else '<='} {t['value']:g})"
        colour = {"reached": "green", "budget": "yellow"}.get(r["status"], "red")
        table.add_row(
            escape(r["workload"]), escape(r["backend"]), str(r["seed"]), f"[{colour}]{r['status']}[/{colour}]", tta,
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
    precision: Annotated[
        str | None, typer.Option(help="fp32 | bf16 | fp16 | bf16_master (default: the --algo bundle's, else fp32)")
    ] = None,
    compile_: Annotated[bool, typer.Option("--compile", help="torch.compile the model")] = False,
    threads: Annotated[int | None, typer.Option(help="torch threads per process (default: cores / processes)")] = None,
    nproc: Annotated[int, typer.Option(min=1, help="processes on this machine (torchrun, data parallel)")] = 1,
    results: Annotated[Path, typer.Option(help="results folder")] = Path("results"),
    json_: Annotated[bool, typer.Option("--json", help="print the results as JSON on stdout")] = False,
    quiet: Annotated[bool, typer.Option(help="no progress lines")] = False,
    fail_fast: Annotated[bool, typer.Option(help="stop at the first run that ends in error or divergence")] = False,
    executor: Annotated[str, typer.Option(help="inline (one after another) | local (--jobs processes) | ray")] = "inline",
    jobs: Annotated[int, typer.Option(min=1, help="--executor local: parallel processes (threads = cores / jobs)")] = 1,
    address: Annotated[str | None, typer.Option(help="--executor ray: cluster address (default: a local instance)")] = None,
    profile: Annotated[bool, typer.Option(help="write a torch.profiler trace of steps 8-12 (after warm-up)")] = False,
    profile_dir: Annotated[Path, typer.Option(help="where --profile writes its Chrome/Perfetto traces")] = Path("profiles"),
    nvtx: Annotated[bool, typer.Option(help="NVTX ranges (step/forward/backward/optimizer/eval) for nsys, CUDA")] = False,
    peak_tflops: Annotated[float | None, typer.Option(help="override the per-device dense peak (TFLOP/s) for MFU")] = None,
    algo: Annotated[str | None, typer.Option(
        help="swap the algorithm: a bundle (adamw, sgd, lion, muon, ...), a bundle .yaml, an optimizer "
             "import path pkg.mod:Class; see docs/algorithms.md")] = None,
    isolate: Annotated[bool, typer.Option(
        help="run each run in a child process of its own, so a crash, hang or kill ends that run, not the suite "
        "(--no-isolate: in this process, e.g. under a debugger)")] = True,
) -> None:
    """Run workloads and record one result per seed. Progress goes to stderr, the summary to stdout."""
    if executor != "inline" and nproc > 1:
        raise fail_input("--nproc is for one run across processes; with --executor local/ray give --jobs or a cluster")
    launched = "WORLD_SIZE" in os.environ  # already a rank of someone's torchrun: run here, as that rank
    if nproc > 1 and not launched and not isolate:
        _precheck_supported(workloads or [], tier, set_ or [], variant, backend, algo, precision)  # before torchrun
        raise typer.Exit(_torchrun(nproc))
    from suite import distributed, harness, isolation
    from suite.algorithms import bundles
    from suite.algorithms import precision as precision_mod
    from suite.data.base import DataMissing
    from suite.spec import SpecError, parse_override

    if precision is not None and precision not in precision_mod.RECIPES:
        raise fail_input(f"--precision {precision!r}: expected one of {', '.join(precision_mod.RECIPES)}")
    if peak_tflops is not None and not peak_tflops > 0:
        raise fail_input(f"--peak-tflops {peak_tflops}: must be a positive number of TFLOP/s per device")
    try:
        overrides = dict(parse_override(s) for s in (set_ or []))
    except SpecError as e:
        raise fail_input(str(e)) from None
    paths = _resolve_workloads(workloads or [], tier)
    specs = []
    for path in paths:
        try:
            specs.append((path, bundles.prepare(path, algo, overrides, variant, precision)))
        except (SpecError, bundles.AlgoError) as e:
            raise fail_input(str(e)) from None
    from suite import registry

    try:
        registry.backend_class(backend)
    except registry.RegistryError as e:
        raise fail_input(f"--backend: {e}") from None
    specs = _check_supported(backend, specs, skip=not workloads)
    _refuse_algorithms(specs, backend)

    is_main = distributed.from_env().is_main
    show = _progress_printer(is_main and not quiet)
    isolated = isolate and not launched
    if is_main:
        _check_results_dir(results)
    rows: list[dict[str, Any]] = []
    bad = False
    requests = [
        harness.RunRequest(
            spec=prepared.spec, backend=backend, seed=s, precision=prepared.precision, compile=compile_,
            threads=threads, results_dir=results, tier=tier, overrides=prepared.overrides, variant=variant,
            spec_source=str(path), extra_config=prepared.extra_config, peak_tflops=peak_tflops,
            profile_dir=profile_dir if profile else None, nvtx=nvtx,
        )
        for path, prepared in specs
        for s in range(seed, seed + seeds)
    ]
    if executor != "inline":
        bad = _run_on_executor(requests, executor, jobs, address, rows, quiet, results)
        requests = []  # done: fall through to the summary
    for req in requests:
        if isolated:
            outcome = isolation.run_isolated(req, nproc=nproc, quiet=quiet)
            if outcome.data_missing:
                raise fail_input(outcome.data_missing)
            # stop only when the user asked the suite to stop (a signal to this process)
            result, written, stop = outcome.result, outcome.path, outcome.signalled is not None
        else:
            try:
                result, written = isolation.execute_guarded(req, show)
            except DataMissing as e:
                raise fail_input(str(e)) from None
            stop = result.status == "interrupted"
        rows.append(_row(result, written))
        if result.status in ("error", "diverged", "interrupted"):
            bad = True
            if is_main and result.error and not quiet:
                err.print(f"[red]{escape(result.workload)} seed {req.seed}: {result.status}[/red]: "
                          f"{escape(result.error)}", highlight=False)
            if fail_fast:
                break
        if stop:
            break
    if is_main:
        if json_:
            _emit_json(rows)
        else:
            out.print(_summary_table(rows))
            out.print(f"results written under {results}/")
    raise typer.Exit(EXIT_FAIL if bad else EXIT_OK)


def _check_results_dir(results: Path) -> None:
    """Fail before the first run, not after it, when results cannot be written (exit 2, nothing measured)."""
    import tempfile

    try:
        results.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=results, prefix=".probe-"):
            pass
    except OSError as e:
        raise fail_input(f"--results {results}: cannot write result files there ({e.strerror or e})") from None


# ---- list / env ------------------------------------------------------------------------------------------


@app.command("list")
def list_(
    tier: Annotated[str | None, typer.Option(help="only this tier")] = None,
    json_: Annotated[bool, typer.Option("--json")] = False,
    matrix: Annotated[bool, typer.Option("--matrix", help="which workload x backend pairs are supported")] = False,
) -> None:
    """The workloads under workloads/, with domain, tiers, target and budget."""
    from suite import registry
    from suite.spec import SpecError, load_spec

    if matrix:
        raise typer.Exit(_print_matrix(tier, json_))

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
        err.print(f"[red]invalid spec[/red] {escape(p)}", highlight=False)
    raise typer.Exit(EXIT_FAIL if problems else EXIT_OK)


@app.command()
def env(
    json_: Annotated[bool, typer.Option("--json")] = False,
    peak: Annotated[bool, typer.Option("--peak", help="also the table peak and a measured GEMM peak")] = False,
    precision: Annotated[str, typer.Option(help="dtype for --peak: fp32 | bf16 | fp16")] = "fp32",
    threads: Annotated[int | None, typer.Option(help="torch threads for --peak on CPU (default: all cores)")] = None,
) -> None:
    """Hardware and software fingerprint, and which backends can run here (and why not)."""
    from suite import devices, environment, registry

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


# ---- peaks (env --peak) ----------------------------------------------------------------------------------


def _env_peak(device: Any, precision: str, threads: int | None, json_: bool) -> None:
    """Print the peak MFU would divide by (table / ISA) beside a measured GEMM peak, in one precision."""
    from suite import devices, peaks

    if precision not in ("fp32", "bf16", "fp16"):
        raise fail_input(f"--precision {precision!r}: expected fp32, bf16 or fp16")
    devices.set_threads(threads)
    device.set_current()
    table, warnings = peaks.resolve(device.type, device.name(), precision)
    gemm = peaks.measure_gemm(device.torch, precision, budget_s=2.0)
    info = {
        "device": device.name(), "device_type": device.type, "precision": precision,
        "dtype": peaks.matmul_dtype(device.type, precision),
        "table_flops_per_s": table.flops_per_s if table else None,
        "table_source": table.source if table else None, "provenance": table.provenance if table else None,
        "measured_flops_per_s": gemm.flops_per_s, "gemm_n": gemm.n, "gemm_repeats": gemm.repeats,
        "measured_over_table": gemm.flops_per_s / table.flops_per_s if table else None, "warnings": warnings,
    }
    if json_:
        _emit_json(info)
        return
    tf = f"{table.flops_per_s / 1e12:.3f} TFLOP/s ({table.provenance}: {table.source})" if table else "unknown"
    out.print(f"[bold]device[/bold] {info['device']} ({device.type}), {info['dtype']}", highlight=False)
    out.print(f"[bold]peak[/bold] {tf}", highlight=False)
    ratio = f" = {info['measured_over_table']:.1%} of the peak" if table else ""
    out.print(f"[bold]measured[/bold] {gemm.flops_per_s / 1e12:.3f} TFLOP/s (GEMM {gemm.n}x{gemm.n}, "
              f"{gemm.repeats} matmuls){ratio}", highlight=False)
    for w in warnings:
        err.print(f"[yellow]warning:[/yellow] {w}", highlight=False)


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
        err.print(f"[red]bad[/red] {escape(e)}", highlight=False)
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

# ---- executors (run --executor local | ray) --------------------------------------------------------------


def _run_on_executor(requests: list[Any], executor: str, jobs: int, address: str | None,
                     rows: list[dict[str, Any]], quiet: bool, results_dir: Path) -> bool:
    """Fan every (workload x seed) out to an executor; write each result as it streams back. True if any is bad."""
    import dataclasses

    from suite.executors import EXECUTORS
    from suite.executors import execute as run_all
    from suite.executors import write as write_from_worker

    if executor not in EXECUTORS:
        raise _bad_input(f"--executor {executor!r}: expected one of {', '.join(EXECUTORS)}")
    if address and executor != "ray":
        raise _bad_input("--address is for --executor ray")
    requests = [dataclasses.replace(r, results_dir=None) for r in requests]  # the driver writes, below
    bad = False
    for result in run_all(requests, executor, jobs=jobs, address=address):
        written = write_from_worker(results_dir, result)
        rows.append(_row(result, written))
        if not quiet:
            err.print(f"[{result.workload} seed {result.seed}] {result.status} -> {written}", highlight=False,
                      markup=False)
        if result.status in ("error", "diverged", "interrupted"):
            bad = True
            if result.error and not quiet:
                err.print(f"[red]{result.workload} seed {result.seed}: {result.status}[/red]: {result.error}",
                          highlight=False)
    return bad


# ---- gh: GitHub API helpers for the workflows ------------------------------------------------------------

gh_app = typer.Typer(help="GitHub API helpers for the workflows (token from $GITHUB_TOKEN).", no_args_is_help=True)
runner_app = typer.Typer(help="Self-hosted GitHub Actions runners.", no_args_is_help=True)
app.add_typer(gh_app, name="gh")
app.add_typer(runner_app, name="runner")

def _say(text: str) -> None:
    """Plain stdout, never re-wrapped (rich would break a printed command line at the terminal width)."""
    sys.stdout.write(text + "\n")


def _say_err(text: str) -> None:
    sys.stderr.write(text + "\n")


def _bad_input(message: str) -> typer.Exit:
    _say_err(f"error: {message}")
    return typer.Exit(EXIT_INPUT)


RepoOpt = Annotated[str | None, typer.Option(help="OWNER/NAME (default: $GITHUB_REPOSITORY)")]


def _gh_call(fn):
    """Run a GitHub call; turn its errors into a clear message and exit code (1 API failure, 2 bad input)."""
    from suite.github import GitHubError, redact

    try:
        return fn()
    except GitHubError as e:
        _say_err(f"github: {redact(str(e))}")
        raise typer.Exit(EXIT_FAIL) from None
    except (ValueError, OSError) as e:
        raise _bad_input(redact(str(e))) from None


def _repo(repo: str | None) -> str:
    value = repo or os.environ.get("GITHUB_REPOSITORY")
    if not value:
        raise _bad_input("--repo OWNER/NAME is required (or set $GITHUB_REPOSITORY)")
    return value


def _read_bodies(files: list[Path]) -> str:
    parts = []
    for f in files:
        try:
            parts.append(f.read_text(encoding="utf-8", errors="replace"))
        except OSError as e:
            raise _bad_input(f"--body-file {f}: {e.strerror}") from None
    return "\n\n".join(p.strip() for p in parts) + "\n"


@gh_app.command("comment")
def gh_comment(
    body_file: Annotated[list[Path], typer.Option("--body-file", help="markdown file(s), joined in order")],
    repo: RepoOpt = None,
    pr: Annotated[int | None, typer.Option(help="pull request number")] = None,
    head_sha: Annotated[str | None, typer.Option(help="find the open PR with this head commit instead")] = None,
    head_label: Annotated[str | None, typer.Option(help="OWNER:BRANCH of the PR head, to find fork PRs")] = None,
    marker: Annotated[str, typer.Option(help="key of the hidden marker that makes the comment sticky")] = "bench",
    author: Annotated[str | None, typer.Option(help="only update a marked comment by this login")] = None,
) -> None:
    """Post the report as one sticky PR comment: updated in place if it exists, created otherwise."""
    from suite.github import GitHub

    name = _repo(repo)
    if (pr is None) == (head_sha is None):
        raise _bad_input("give exactly one of --pr or --head-sha")
    body = _read_bodies(body_file)

    def call():
        gh = GitHub()
        number = pr if pr is not None else gh.find_pull_request(name, head_sha or "", head_label)
        return gh.sticky_comment(name, number, body, key=marker, author=author)

    done = _gh_call(call)
    _say(f"{done['action']} comment {done['id']} {done.get('url') or ''}")


@gh_app.command("status")
def gh_status(
    sha: Annotated[str, typer.Option(help="the commit (full SHA)")],
    repo: RepoOpt = None,
    state: Annotated[str | None, typer.Option(help="success | failure | error | pending")] = None,
    exit_code_file: Annotated[Path | None, typer.Option(help="a file holding compare's exit code (0/1/2)")] = None,
    context: Annotated[str, typer.Option(help="the status name shown on the PR")] = "trainbench",
    description: Annotated[str, typer.Option(help="one line, at most 140 characters")] = "",
    target_url: Annotated[str | None, typer.Option(help="link from the status (e.g. the workflow run)")] = None,
    check_run: Annotated[bool, typer.Option("--check-run", help="create a check run instead (checks: write)")] = False,
    summary_file: Annotated[Path | None, typer.Option(help="--check-run: markdown for the check's summary")] = None,
) -> None:
    """Set a commit status (or check run) carrying compare's verdict."""
    from suite.github import STATES, GitHub, state_from_exit_code

    name = _repo(repo)
    if (state is None) == (exit_code_file is None):
        raise _bad_input("give exactly one of --state or --exit-code-file")
    if exit_code_file is not None:
        try:
            state = state_from_exit_code(exit_code_file.read_text(encoding="utf-8", errors="replace")[:20])
        except OSError:
            state = "error"  # no verdict file: the benchmark job did not get as far as compare
    if state not in STATES:
        raise _bad_input(f"--state {state!r}: expected one of {', '.join(STATES)}")
    words = {"success": "no regression", "failure": "regression found", "error": "benchmark or compare failed",
             "pending": "running"}
    desc = description or words[state]

    def call():
        gh = GitHub()
        if check_run:
            conclusion = {"success": "success", "failure": "failure", "error": "failure", "pending": "neutral"}[state]
            summary = _read_bodies([summary_file]) if summary_file else desc
            return gh.check_run(name, sha, context, conclusion, desc, summary, target_url)
        return gh.commit_status(name, sha, state, context, desc, target_url)

    _gh_call(call)
    _say(f"{'check run' if check_run else 'status'} {context}: {state} on {sha[:12]}")


@gh_app.command("summary")
def gh_summary(
    body_file: Annotated[list[Path], typer.Option("--body-file", help="markdown file(s), joined in order")],
    out_file: Annotated[Path | None, typer.Option("--out", help="default: $GITHUB_STEP_SUMMARY")] = None,
) -> None:
    """Append markdown to the job summary ($GITHUB_STEP_SUMMARY)."""
    from suite.github import write_step_summary

    path = _gh_call(lambda: write_step_summary(_read_bodies(body_file), out_file))
    _say_err(f"appended to {path}")


@gh_app.command("download-artifact")
def gh_download_artifact(
    run_id: Annotated[int, typer.Option(help="the workflow run that uploaded the artifacts")],
    dest: Annotated[Path, typer.Option(help="folder; each artifact goes to DEST/<artifact name>/")],
    repo: RepoOpt = None,
    name: Annotated[str | None, typer.Option(help="exactly this artifact")] = None,
    prefix: Annotated[str | None, typer.Option(help="every artifact whose name starts with this")] = None,
    max_mb: Annotated[int, typer.Option(help="refuse artifacts larger than this (packed or unpacked)")] = 512,
) -> None:
    """Download and safely extract a run's artifacts (untrusted data: no links, no path escapes, bounded)."""
    from suite.github import GitHub, GitHubError

    full = _repo(repo)
    if (name is None) == (prefix is None):
        raise _bad_input("give exactly one of --name or --prefix")

    def call():
        gh = GitHub()
        arts = [a for a in gh.list_artifacts(full, run_id)
                if (a.get("name") == name if name is not None else str(a.get("name", "")).startswith(prefix or ""))]
        if not arts:
            raise GitHubError(f"run {run_id} has no artifact {'named ' + repr(name) if name else 'starting ' + repr(prefix)}")
        got = {}
        for a in arts:
            safe = str(a["name"])
            if not safe or "/" in safe or "\\" in safe or safe in (".", ".."):
                raise GitHubError(f"artifact name {safe!r} is not a plain name; refusing")
            got[safe] = gh.download_artifact(full, a, dest / safe, max_bytes=max_mb * 1024 * 1024)
        return got

    got = _gh_call(call)
    for art, files in got.items():
        _say(f"{art}: {len(files)} file(s) -> {dest / art}")


@runner_app.command("register")
def runner_register(
    labels: Annotated[str, typer.Option(help="comma-separated labels, e.g. gpu,h200 (self-hosted is implicit)")],
    repo: RepoOpt = None,
    org: Annotated[str | None, typer.Option(help="register at organisation level instead")] = None,
    name: Annotated[str | None, typer.Option(help="runner name (default: host name)")] = None,
    ephemeral: Annotated[bool, typer.Option(help="one job per registration (recommended)")] = True,
    runner_dir: Annotated[Path, typer.Option(help="the unpacked actions-runner folder")] = Path("actions-runner"),
    run_config: Annotated[bool, typer.Option("--run", help="run config.sh now instead of printing it")] = False,
    show_token: Annotated[bool, typer.Option(help="print the registration token in the command")] = False,
) -> None:
    """Get a runner registration token (needs an admin token in $GITHUB_TOKEN) and print or run config.sh."""
    import shlex

    from suite.github import GitHub, runner_config_command

    if org is None:
        target = _repo(repo)
        url = f"{os.environ.get('GITHUB_SERVER_URL', 'https://github.com').rstrip('/')}/{target}"
    else:
        target = None
        url = f"{os.environ.get('GITHUB_SERVER_URL', 'https://github.com').rstrip('/')}/{org}"
    label_list = [x.strip() for x in labels.split(",") if x.strip()]
    if not label_list:
        raise _bad_input("--labels: give at least one label, e.g. --labels gpu,h200")
    data = _gh_call(lambda: GitHub().runner_registration_token(repo=target, org=org))
    cmd = _gh_call(lambda: runner_config_command(url, data["token"], label_list, name, ephemeral))
    shown = [("***" if (a == data["token"] and not show_token) else a) for a in cmd]
    if not run_config:
        _say(f"cd {shlex.quote(str(runner_dir))} && {shlex.join(shown)}")
        _say_err(f"token expires at {data.get('expires_at', '?')}")
        return
    if not (runner_dir / "config.sh").exists():
        raise _bad_input(f"--runner-dir {runner_dir}: no config.sh there (unpack the actions-runner release first)")
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    _say_err(f"running in {runner_dir}: {shlex.join(shown)}")
    raise typer.Exit(subprocess.call(cmd, cwd=runner_dir, env=env))


# ---- algorithms under test: --algo checks and `trainbench study` ----------------------------------------


def _refuse_algorithms(specs: list[Any], backend: str) -> None:
    """Precision or compression this backend / device cannot do: refused with the reason, before any run."""
    from suite import devices
    from suite.algorithms import plugins

    device_type = devices.detect_type()
    for _, prepared in specs:
        reasons = plugins.refusals(prepared.spec, backend, prepared.precision, device_type)
        if reasons:
            raise fail_input("; ".join(reasons))


@app.command()
def study(
    study_file: Annotated[Path, typer.Argument(help="a study YAML (studies/*.yaml): workloads x algorithms x seeds")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="where study.json/.md/.svg/.html go")] = None,
    results: Annotated[Path, typer.Option(help="results folder for the runs' result files")] = Path("results"),
    threads: Annotated[int | None, typer.Option(help="torch threads per run")] = None,
    json_: Annotated[bool, typer.Option("--json", help="print the scores as JSON on stdout")] = False,
    quiet: Annotated[bool, typer.Option(help="no progress lines")] = False,
) -> None:
    """Run a study and score each algorithm with AlgoPerf performance profiles (JSON, Markdown, SVG, HTML)."""
    from suite import study as study_mod
    from suite.data.base import DataMissing
    from suite.spec import SpecError

    try:
        st = study_mod.load_study(study_file)
        plan = study_mod.plan(st, study_file.parent)
    except (SpecError, study_mod.StudyError) as e:
        raise fail_input(str(e)) from None
    _refuse_algorithms([(None, cell.prepared) for cell in plan], st.backend)
    out_dir = out_dir or Path("studies") / "_out" / st.name
    try:
        report = study_mod.run_study(st, plan, results_dir=results, threads=threads,
                                     progress=_progress_printer(not quiet))
    except DataMissing as e:
        raise fail_input(str(e)) from None
    paths = study_mod.write_outputs(report, out_dir)
    if json_:
        _emit_json(report["scores"])
    else:
        sys.stdout.write(study_mod.markdown(report) + "\n")
        out.print(f"study outputs: {', '.join(str(p) for p in paths)}", highlight=False)
    raise typer.Exit(EXIT_FAIL if report["errors"] else EXIT_OK)


# ---- compare and baselines (suite/compare.py, suite/baselines.py; docs/compare.md) -----------------------

baseline_app = typer.Typer(help="Blessed baselines that pull requests are compared against.", no_args_is_help=True)
app.add_typer(baseline_app, name="baseline")


@app.command()
def compare(
    baseline: Annotated[list[Path], typer.Option("--baseline", "-b", help="baseline files/folder, or a results folder")],
    candidate: Annotated[list[Path], typer.Option("--candidate", "-c", help="the candidate's results folder")],
    format_: Annotated[str, typer.Option("--format", help="md (for a PR comment) or json")] = "md",
    out_file: Annotated[Path | None, typer.Option("--out", help="write the report here instead of stdout")] = None,
    json_out: Annotated[Path | None, typer.Option("--json-out", help="also write the JSON report here")] = None,
    alpha: Annotated[float, typer.Option(help="level of the two-sided test, per metric")] = 0.05,
    noise_floor: Annotated[float, typer.Option(help="relative change ignored where the spec sets none")] = 0.05,
    min_seeds: Annotated[int, typer.Option(help="fewest runs per side to compare at all")] = 3,
    gate: Annotated[str | None, typer.Option(help="comma-separated metrics whose regression fails (exit 1)")] = None,
    strict: Annotated[bool, typer.Option(help="a bad result file is an error (exit 2), not skipped")] = False,
    validate: Annotated[bool, typer.Option(help="validate every file against the full Result schema (slower)")] = False,
) -> None:
    """Compare candidate runs against baselines. Exit 0: no regression; 1: a regression; 2: bad input or
    nothing comparable."""
    from suite import compare as cmp

    if format_ not in ("md", "json"):
        raise fail_input(f"--format {format_!r}: expected md or json")
    try:
        settings = cmp.Settings(alpha=alpha, default_noise_floor=noise_floor, min_seeds=min_seeds,
                                gate=tuple(g.strip() for g in gate.split(",") if g.strip()) if gate else cmp.DEFAULT_GATE)
        report = cmp.compare(baseline, candidate, settings, strict=strict, validate=validate)
    except ValueError as e:  # ResultError is a ValueError: a missing path, or a bad file under --strict
        raise fail_input(str(e)) from None
    as_json = json.dumps(cmp.to_json(report), indent=2) + "\n" if format_ == "json" or json_out else ""
    text = as_json if format_ == "json" else cmp.to_markdown(report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(as_json, encoding="utf-8")
    if out_file is None:
        sys.stdout.write(text)
    else:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(text, encoding="utf-8")
    for problem in report.errors:  # no markup: messages quote JSON paths such as `$.runs[0]`
        err.print(f"skipped bad file {problem}", markup=False, highlight=False, soft_wrap=True)
    err.print(cmp.summary_line(report).replace("**", ""), markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(report.exit_code)


@baseline_app.command("promote")
def baseline_promote(
    results: Annotated[list[Path], typer.Argument(help="result files or folders to bless")],
    to: Annotated[Path, typer.Option("--to", help="baselines folder")] = Path("baselines"),
    hardware: Annotated[str | None, typer.Option(help="only results of this hardware slug")] = None,
    spec_hash: Annotated[str | None, typer.Option(help="only results of this spec hash")] = None,
    min_seeds: Annotated[int, typer.Option(help="fewest seeds a baseline may have")] = 3,
    replace: Annotated[bool, typer.Option(help="replace existing baseline files")] = False,
) -> None:
    """Aggregate results (several seeds of one spec on one hardware) into baseline files."""
    from suite import baselines as bl

    try:
        loaded = bl.load_paths(results, strict=False, validate=True)
    except ValueError as e:
        raise fail_input(str(e)) from None
    problems = list(loaded.errors) + [f"{src}: is a baseline file, not a result" for src, _ in loaded.baselines]
    if problems:
        raise fail_input("refusing to promote; fix or leave out these files:\n  " + "\n  ".join(problems))
    records = [r for r in loaded.records if (hardware is None or r.key.hardware == hardware)
               and (spec_hash is None or r.spec_hash == spec_hash)]
    if not records:
        raise fail_input(f"no result files under {', '.join(map(str, results))} match"
                         + (f" --hardware {hardware}" if hardware else "") + (f" --spec-hash {spec_hash}" if spec_hash else ""))
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
                      soft_wrap=True)
    except bl.PromoteError as e:
        raise fail_input(str(e)) from None


# ---- backends: support matrix ---------------------------------------------------------------------------


def _check_supported(backend: str, specs: list[tuple[Path, Any]], skip: bool = False) -> list[tuple[Path, Any]]:
    """An unsupported workload x backend pair is bad input: refused before any process or model starts.

    With `skip` (a whole tier was asked for), unsupported workloads are left out with a note instead, and
    only a tier with nothing this backend can run is an error.
    """
    from suite import devices, registry
    from suite.backends.support import unsupported_reason

    avail = registry.backend_class(backend)(devices.current()).available()
    if not avail.ok:
        raise fail_input(f"--backend {backend} is not available here: {avail.reason}. `trainbench env` lists "
                         "the backends and why each is or is not available.")
    kept = []
    for path, prepared in specs:
        spec = prepared.spec  # a bundles.Prepared: the spec after --algo and --set
        reason = unsupported_reason(backend, spec)
        if not reason:
            kept.append((path, prepared))
        elif skip:
            err.print(f"skipping {spec.name}: not supported by --backend {backend}: {reason}", highlight=False)
        else:
            raise fail_input(f"{spec.name} ({path}) cannot run on --backend {backend}: {reason}. "
                             "`trainbench list --matrix` shows the supported pairs.")
    if not kept:
        raise fail_input(f"no workload of this tier runs on --backend {backend}; `trainbench list --matrix`")
    return kept


def _precheck_supported(names: list[str], tier: str | None, sets: list[str], variant: str | None,
                        backend: str, algo: str | None, precision: str | None) -> None:
    from suite import registry
    from suite.algorithms import bundles
    from suite.spec import SpecError, parse_override

    try:
        registry.backend_class(backend)
        overrides = dict(parse_override(x) for x in sets)
        specs = [(p, bundles.prepare(p, algo, overrides, variant, precision)) for p in _resolve_workloads(names, tier)]
    except (SpecError, registry.RegistryError, bundles.AlgoError) as e:
        raise fail_input(str(e)) from None
    _check_supported(backend, specs, skip=not names)


def _print_matrix(tier: str | None, json_: bool) -> int:
    from suite import registry
    from suite.backends.support import load_all, matrix

    specs, problems = load_all(registry.workload_files())
    if tier:
        specs = {n: s for n, s in specs.items() if tier in s.tiers}
    grid = matrix(specs)
    if json_:
        _emit_json({wl: {b: {"supported": r is None, "reason": r} for b, r in row.items()} for wl, row in grid.items()})
    else:
        table = Table(title="workload x backend (yes = supported; `trainbench env` says which are installed)")
        table.add_column("workload")
        for b in registry.BACKENDS:
            table.add_column(b)
        for wl, row in grid.items():
            table.add_row(wl, *("[green]yes[/green]" if r is None else "[red]no[/red]" for r in row.values()))
        out.print(table)
        for wl, row in grid.items():
            for b, r in row.items():
                if r is not None:
                    out.print(f"{wl} x {b}: {r}", highlight=False)
    for p in problems:
        err.print(f"[red]invalid spec[/red] {p}", highlight=False)
    return EXIT_FAIL if problems else EXIT_OK


# ---- site ------------------------------------------------------------------------------------------------

site_app = typer.Typer(help="The static leaderboard site: build it from results/, preview it.", no_args_is_help=True)
app.add_typer(site_app, name="site")


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
    from suite.results import ResultError
    from suite.site import SiteError, build_site

    try:
        report = build_site(results, out_dir, baselines=baselines, compare=compare or [], strict=strict,
                            studies=study or [])
    except (SiteError, ResultError) as e:
        err.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(EXIT_FAIL if isinstance(e, ResultError) else EXIT_INPUT) from None
    for s in report.skipped:
        err.print(f"[yellow]skipped[/yellow] {s}", highlight=False)
    out.print(f"built {report.pages} pages from {report.results} results ({report.workloads} workloads) in "
              f"{report.seconds:.2f} s; index {report.index_bytes / 1024:.0f} KiB", highlight=False)
    out.print(f"open {report.index.resolve().as_uri()}", highlight=False, soft_wrap=True)


@site_app.command("serve")
def site_serve(
    out_dir: Annotated[Path, typer.Option("--out", help="the built site folder")] = Path("site/_build"),
    port: Annotated[int, typer.Option(min=0, max=65535, help="port on 127.0.0.1 (0: any free port)")] = 8000,
) -> None:
    """Preview the built site on http://127.0.0.1:PORT/ (loopback only; Ctrl-C stops it)."""
    from suite.site import SiteError, serve

    try:
        serve(out_dir, port, announce=lambda line: (out.print(line, highlight=False, soft_wrap=True),
                                                   sys.stdout.flush()))
    except SiteError as e:
        raise fail_input(str(e)) from None
    except OSError as e:
        raise fail_input(f"--port {port}: cannot listen on 127.0.0.1: {e}") from None

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
