"""`trainbench run` and `trainbench study`: plan the runs, hand them to a launcher, print the summary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from suite.cli.common import EXIT_FAIL, EXIT_OK, check_writable, emit_json, err, fail_input, out, say_err
from suite.cli.options import BACKEND_CHOICES
from suite.execution.plan import (
    MAX_SEED,  # imports only the standard library: `trainbench --help` stays instant
)
from suite.run_flags import RunFlags

MAX_SEEDS = 1000  # `--seeds 100000` once started a days-long suite without a word; compare needs a handful


def _row(result: Any, written: Path | None) -> dict[str, Any]:
    """One run as `run --json` prints it (and the summary table shows it)."""
    row = result.model_dump(mode="json", include={
        "workload", "backend", "seed", "status", "time_to_target_s", "steps", "train_s", "throughput",
        "final_metrics", "error", "run_id", "mfu", "synthetic_data"})
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
        colour = {"reached": "green", "measured": "green", "budget": "yellow"}.get(r["status"], "red")
        if r.get("synthetic_data"):  # `data prepare --synthetic` files: said where the figures are read
            final += " [SYNTHETIC data]"
        table.add_row(
            escape(r["workload"]), escape(r["backend"]), str(r["seed"]), f"[{colour}]{r['status']}[/{colour}]", tta,
            str(r["steps"]), f"{sps:,.0f}" if sps else "-", final,
        )
    return table


def _torchrun(nproc: int, rendezvous: list[str]) -> int:
    """Re-run this very command under torchrun with `nproc` processes, each rank in-process (--no-isolate)."""
    from suite.execution.processes import torchrun_command, torchrun_env

    cleaned: list[str] = []
    skip = False
    for a in sys.argv[1:]:
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = True
            continue
        if a.startswith("--nproc="):
            continue
        cleaned.append(a)
    return subprocess.call(torchrun_command(nproc, "suite.cli", cleaned, rendezvous),
                           env=torchrun_env({**os.environ, "TRAINBENCH_LAUNCHED": "1"}))


def run(
    workloads: Annotated[list[str] | None, typer.Argument(help="names (cv/digits_cnn) or spec paths")] = None,
    tier: Annotated[str | None, typer.Option(help="run every workload of a tier: smoke | standard | full")] = None,
    backend: Annotated[str, typer.Option(help=BACKEND_CHOICES)] = "torch",
    seeds: Annotated[int, typer.Option(min=1, max=MAX_SEEDS, help="number of seeds, run one after another")] = 1,
    seed: Annotated[int, typer.Option(help=f"first seed (0 to {MAX_SEED})")] = 0,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a spec field: --set optimizer.lr=0.01")] = None,
    variant: Annotated[str | None, typer.Option(help="a named override set from the spec, e.g. tiny")] = None,
    precision: Annotated[
        str | None, typer.Option(help="fp32 | bf16 | fp16 | bf16_master | float8 (CUDA 8.9+, torchao) (default: the --algo bundle's, else fp32)")
    ] = None,
    compile_: Annotated[bool | None, typer.Option(
        "--compile/--no-compile", help="torch.compile the model (default: the spec's `compile`, else eager)")] = None,
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads per process (default: cores / processes)")] = None,
    nproc: Annotated[int, typer.Option(min=1, help="processes on this machine (torchrun, data parallel)")] = 1,
    results: Annotated[Path, typer.Option(help="results folder")] = Path("results"),
    json_: Annotated[bool, typer.Option("--json", help="print the results as JSON on stdout")] = False,
    quiet: Annotated[bool, typer.Option(help="no progress lines")] = False,
    fail_fast: Annotated[bool, typer.Option(help="stop at the first run that ends in error or divergence")] = False,
    executor: Annotated[str, typer.Option(
        help="inline (one after another) | local (--jobs processes) | ray | slurm (a batch job per run)")] = "inline",
    jobs: Annotated[int, typer.Option(min=1, help="--executor local: parallel processes (threads = cores / jobs)")] = 1,
    address: Annotated[str | None, typer.Option(help="--executor ray: cluster address (default: a local instance)")] = None,
    profile: Annotated[bool, typer.Option(help="write a torch.profiler trace of steps 8-12 (after warm-up)")] = False,
    profile_dir: Annotated[Path, typer.Option(help="where --profile writes its Chrome/Perfetto traces")] = Path("profiles"),
    nvtx: Annotated[bool, typer.Option(help="NVTX ranges (step/forward/backward/optimizer/eval) for nsys, CUDA")] = False,
    peak_tflops: Annotated[float | None, typer.Option(help="override the per-device dense peak (TFLOP/s) for MFU")] = None,
    attention_flops: Annotated[str, typer.Option(
        help="attention FLOPs convention of MFU: full (PaLM, no causal discount) | causal (half); the other "
             "figure is stored beside")] = "full",
    mlperf_org: Annotated[str | None, typer.Option(
        envvar="TRAINBENCH_MLPERF_ORG", help="MLLOG submission_org (default: unspecified)")] = None,
    mlperf_division: Annotated[str, typer.Option(
        envvar="TRAINBENCH_MLPERF_DIVISION",
        help="MLLOG submission_division: open | closed (sets MLPerf's init limit: 240 | 30 min)")] = "open",
    algo: Annotated[str | None, typer.Option(
        help="swap the algorithm: a bundle (adamw, sgd, lion, muon, ...), a bundle .yaml, an optimizer "
             "import path pkg.mod:Class; see docs/algorithms.md")] = None,
    mode: Annotated[str, typer.Option(
        help="tta: train to the target on the clock | throughput: warm-up, then the spec's throughput.measure_steps "
             "timed one by one (no evaluation; status measured)")] = "tta",
    isolate: Annotated[bool, typer.Option(
        help="run each run in a child process of its own, so a crash, hang or kill ends that run, not the suite "
        "(--no-isolate: in this process, e.g. under a debugger)")] = True,
    parallel: Annotated[str | None, typer.Option(
        help="process layout, e.g. fsdp=2 | tp=2 | pp=2,schedule=gpipe | dp=2,fsdp=2,tp=2 | tp=2,sp=false "
             "(product = processes; with tp, sp and loss_parallel default on; the spec's parallel: block as "
             "--set parallel.X=N)")] = None,
    ac: Annotated[str | None, typer.Option(help="activation checkpointing: none | selective | full")] = None,
    nnodes: Annotated[int, typer.Option(min=1, help="machines of a multi-node run (torchrun --nnodes)")] = 1,
    node_rank: Annotated[int, typer.Option(min=0, help="this machine's place in a multi-node run (0 = node 0)")] = 0,
    rdzv_endpoint: Annotated[str | None, typer.Option(help="HOST:PORT of node 0 for a multi-node run")] = None,
    slurm: Annotated[list[str] | None, typer.Option(
        help="--executor slurm: KEY=VALUE (partition, account, time, gpus_per_node, nodes, sbatch, setup, ...) or "
             "a YAML file of them; repeat it, later ones win; see docs/slurm.md")] = None,
    checkpoint_every: Annotated[str | None, typer.Option(
        help="save a checkpoint every N steps (50) or seconds (30s), torch.distributed.checkpoint (the torch "
             "backend); the spec's checkpoint: block as --set checkpoint.X=V; see docs/metrics.md")] = None,
    max_restarts: Annotated[int, typer.Option(
        min=0, help="restart the job from its last checkpoint up to K times when a rank fails (torchrun's elastic "
                    "agent; --executor inline)")] = 0,
) -> None:
    """Run workloads and record one result per seed. Progress goes to stderr, the summary to stdout."""
    execute(RunFlags(
        workloads=list(workloads or []), tier=tier, backend=backend, seeds=seeds, seed=seed, sets=list(set_ or []),
        variant=variant, precision=precision, compile=compile_, threads=threads, nproc=nproc, results=results,
        json=json_, quiet=quiet, fail_fast=fail_fast, executor=executor, jobs=jobs, address=address,
        profile=profile, profile_dir=profile_dir, nvtx=nvtx, peak_tflops=peak_tflops,
        attention_flops=attention_flops, mlperf_org=mlperf_org, mlperf_division=mlperf_division, algo=algo,
        mode=mode, isolate=isolate, parallel=parallel, ac=ac, nnodes=nnodes, node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint, slurm=list(slurm or []), checkpoint_every=checkpoint_every,
        max_restarts=max_restarts))


def execute(o: RunFlags) -> None:
    """`run` with its options as one object (the flags' values): plan, launch, print the summary, exit."""
    from suite.backends import layout
    from suite.execution import plan as planner

    sets = list(o.sets)

    try:
        planner.check_seeds(o.seed, o.seeds)
        planner.preflight(o.workloads or [], o.tier, o.backend, sets or [], o.variant, o.algo)  # no torch: errors at once
    except planner.PlanError as e:
        raise fail_input(str(e)) from None
    try:  # the layout flags are spec overrides: one road for the flag, the spec block and --set
        sets = [*(sets or []), *(f"{k}={v}" for k, v in layout.parse_flag(o.parallel or "").items())]
        sets += [f"parallel.ac={o.ac}"] if o.ac is not None else []
        if o.checkpoint_every is not None:
            from suite.spec import CheckpointSpec

            sets += [f"{k}={v}" for k, v in CheckpointSpec.flag_overrides(o.checkpoint_every).items()]
        if o.executor == "slurm" and (o.node_rank or o.rdzv_endpoint):
            raise layout.LayoutError("--node-rank and --rdzv-endpoint: under --executor slurm, Slurm places the "
                                     "nodes and the rendezvous is taken from the job (give --nnodes only)")
        rendezvous = layout.torchrun_args(1 if o.executor == "slurm" else o.nnodes, o.node_rank, o.rdzv_endpoint)
        if o.max_restarts:
            if o.executor != "inline" or not o.isolate:
                raise layout.LayoutError("--max-restarts: the job restarts under torchrun's elastic agent, started "
                                         "by --executor inline (isolated); Slurm's requeue is not implemented")
            rendezvous = [*rendezvous, f"--max-restarts={o.max_restarts}"]
    except (layout.LayoutError, ValueError) as e:
        raise fail_input(str(e)) from None
    if len(sets) > len(o.sets):  # --parallel, --ac, --checkpoint-every are --set's too: checked against the schema now
        try:
            planner.preflight(o.workloads or [], o.tier, o.backend, sets, o.variant, o.algo)
        except planner.PlanError as e:
            raise fail_input(str(e)) from None
    launched = "WORLD_SIZE" in os.environ  # already a rank of someone's torchrun: run here, as that rank
    world = int(os.environ["WORLD_SIZE"]) if launched else o.nproc * o.nnodes
    if (o.nproc > 1 or o.nnodes > 1) and not launched and not o.isolate:
        _plan(planner, o.workloads, o.tier, o.backend, sets, o.variant, o.precision, o.algo, world)  # refuse before torchrun
        raise typer.Exit(_torchrun(o.nproc, rendezvous))
    from suite.execution import launch

    try:
        o.check()
    except ValueError as e:
        raise fail_input(str(e)) from None
    options = launch_options(o, launched, rendezvous)
    try:
        launch.check(options)
    except ValueError as e:
        raise fail_input(str(e)) from None
    from suite import distributed
    from suite.execution import forkserver

    # nothing so far imported torch: the fork server imports it and the suite on the other core, now
    launch.prewarm(o.backend, options)
    is_main = distributed.from_env().is_main
    try:  # a refusal below ends the fork server at once (not after its imports)
        from suite.algorithms import precision as precision_mod

        if o.precision is not None and o.precision not in precision_mod.RECIPES:
            raise fail_input(f"--precision {o.precision!r}: expected one of {', '.join(precision_mod.RECIPES)}")
        specs = _plan(planner, o.workloads, o.tier, o.backend, sets, o.variant, o.precision, o.algo, world)
        if is_main:  # every output folder, before the first run (not after the last one trained)
            check_writable(o.results, "--results", "result files")
            if o.executor == "slurm":  # the folder's path goes into each job's batch script
                launch.check_script_path(o.results, "--results")
                launch.check_requeue(options, specs)
            if o.profile:
                check_writable(o.profile_dir, "--profile-dir", "profiler traces")
        launch.launcher_for(options)  # the launcher's own checks (--jobs, Ray's import)
    except ValueError as e:
        forkserver.stop()
        raise fail_input(str(e)) from None
    except BaseException:
        forkserver.stop()
        raise
    requests = planner.requests(
        specs, o.backend, o.seed_range, compile=o.compile, threads=o.threads, results_dir=o.results,
        tier=o.tier, variant=o.variant, peak_tflops=o.peak_tflops, profile_dir=o.profile_dir if o.profile else None, nvtx=o.nvtx,
        attention_flops=o.attention_flops, mlperf_org=o.mlperf_org, mlperf_division=o.mlperf_division,
        mode=o.mode)
    rows: list[dict[str, Any]] = []
    ran: list[Any] = []  # the Results, for the loaded-host note (rows hold what --json prints)
    bad = False
    for outcome in launch.launch(requests, options, launch.Control(fail_fast=o.fail_fast)):
        result = outcome.result
        if outcome.data_missing:
            if o.executor == "inline":  # this machine lacks the data: bad input, nothing recorded
                raise fail_input(outcome.data_missing)
            outcome.path = write_or_report(o.results, result)  # a worker node lacks it: that run failed there
        if outcome.write_error:
            bad = True
            say_err(outcome.write_error)
            sys.stdout.write(result.model_dump_json() + "\n")  # the measurements, so nothing is lost
        rows.append(_row(result, outcome.path))
        if outcome.recorded_by:  # a multi-node run seen from node R > 0: node 0 writes the one result
            rows[-1]["recorded_by"] = outcome.recorded_by
        ran.append(result)
        if result.status in launch.BAD:
            bad = True
            if is_main and result.error and not o.quiet:
                err.print(f"[red]{escape(result.workload)} seed {result.seed}: {result.status}[/red]: "
                          f"{escape(result.error)}", highlight=False)
    if is_main:
        if o.json:
            emit_json(rows)
        else:
            out.print(_summary_table(rows))
            if o.node_rank > 0:
                ids = ", ".join(str(r["run_id"]) for r in rows)
                out.print(f"node {o.node_rank} of {o.nnodes}: node 0 writes the results (run id {ids}); nothing is "
                          "written here unless this node's ranks ended without reporting", markup=False,
                          highlight=False, soft_wrap=True)
            else:
                out.print(f"results written under {o.results}/", markup=False, highlight=False, soft_wrap=True)
        _note_loaded_host(ran, specs)
    raise typer.Exit(EXIT_FAIL if bad else EXIT_OK)


def launch_options(o: RunFlags, launched: bool = False, rendezvous: list[str] | None = None) -> Any:
    """How to launch the runs of these options (suite.execution.launch.Options): `run`'s and `study`'s one road.
    `launched`: this process is already a rank of someone's torchrun; `rendezvous`: torchrun's node arguments."""
    from suite.execution import launch

    options = launch.Options(executor=o.executor, jobs=o.jobs, address=o.address, nproc=1 if launched else o.nproc,
                             quiet=o.quiet, isolate=o.isolate and not launched, slurm=list(o.slurm),
                             nnodes=o.nnodes if o.executor == "slurm" else 1)
    if rendezvous is not None:  # else launch.Options' default (one node, standalone)
        options.torchrun_args = rendezvous
    return options


def write_or_report(root: Path, result: Any) -> Path | None:
    """Write a record the driver holds; when the folder cannot take it, say so (stderr) and return None."""
    from suite.results.record import ResultWriteError, write_run

    try:
        return write_run(root, result)
    except ResultWriteError as e:
        say_err(str(e))
        return None


def _note_loaded_host(ran: list[Any], specs: list[tuple[Path, Any]]) -> None:
    """Say so when runs ended on their time budget on a loaded host (the load each result recorded)."""
    from suite.cli.notes import budget_note

    limits = {p.spec.name: (p.spec.budget.max_train_s, p.spec.budget.max_steps) for _, p in specs}
    note = budget_note(ran, limits)
    if note:
        err.print(note, markup=False, highlight=False, soft_wrap=True)




def _plan(planner, workloads, tier, backend, sets, variant, precision, algo, world=1):
    try:
        return planner.plan(workloads or [], tier, backend, sets=sets or [], variant=variant, precision=precision,
                            algo=algo, note=lambda line: err.print(line, highlight=False, markup=False), world=world)
    except planner.PlanError as e:
        raise fail_input(str(e)) from None


def study(
    study_file: Annotated[Path, typer.Argument(help="a study YAML (studies/*.yaml): workloads x algorithms x seeds")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="where study.json/.md/.svg/.html go")] = None,
    results: Annotated[Path, typer.Option(help="results folder for the runs' result files")] = Path("results"),
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads per run")] = None,
    json_: Annotated[bool, typer.Option("--json", help="print the scores as JSON on stdout")] = False,
    quiet: Annotated[bool, typer.Option(help="no progress lines")] = False,
    executor: Annotated[str | None, typer.Option(
        help="inline | local | ray, as for `run` (default: the study file's, else inline)")] = None,
    jobs: Annotated[int | None, typer.Option(min=1, help="--executor local: runs at once")] = None,
    address: Annotated[str | None, typer.Option(help="--executor ray: cluster address")] = None,
    fail_fast: Annotated[bool, typer.Option(help="stop at the first run that ends in error or divergence")] = False,
    nproc: Annotated[int, typer.Option(min=1, help="processes per run (torchrun, data parallel)")] = 1,
) -> None:
    """Run a study and score each algorithm with AlgoPerf performance profiles (JSON, Markdown, SVG, HTML)."""
    from suite.data.base import DataMissing
    from suite.execution import launch
    from suite.spec import SpecError
    from suite.studies import runner as study_mod

    try:
        st = study_mod.load_study(study_file)
        plan = study_mod.plan(st, study_file.parent)
    except (SpecError, study_mod.StudyError) as e:
        raise fail_input(str(e)) from None
    from suite.execution import plan as planner

    try:
        planner.refuse_algorithms([cell.prepared for cell in plan], st.backend)
    except planner.PlanError as e:
        raise fail_input(str(e)) from None
    out_dir = out_dir or Path("studies") / "_out" / st.name
    check_writable(results, "--results", "result files")  # both before the first run, not after the last
    check_writable(out_dir, "--out", "the study's outputs")
    o = RunFlags(results=results, threads=threads, json=json_, quiet=quiet, executor=executor or st.executor,
                   jobs=jobs or st.jobs, address=address, fail_fast=fail_fast, nproc=nproc)
    options = launch_options(o)
    try:
        launch.launcher_for(options)
        if options.executor == "slurm":  # the folder's path goes into each job's batch script
            launch.check_script_path(results, "--results")
    except ValueError as e:
        raise fail_input(str(e)) from None
    try:
        report = study_mod.run_study(st, plan, results_dir=o.results, threads=o.threads, options=options,
                                     control=launch.Control(fail_fast=o.fail_fast))
    except DataMissing as e:
        raise fail_input(str(e)) from None
    paths = study_mod.write_outputs(report, out_dir)
    if json_:
        emit_json(report["scores"])
    else:
        sys.stdout.write(study_mod.markdown(report) + "\n")
        out.print(f"study outputs: {', '.join(str(p) for p in paths)}", highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(EXIT_FAIL if report["errors"] else EXIT_OK)




def register(app: typer.Typer) -> None:
    app.command()(run)
    app.command()(study)
