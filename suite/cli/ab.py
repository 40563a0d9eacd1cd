"""`trainbench ab`: two commits on one runner, in alternating blocks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from suite.cli.common import EXIT_FAIL, EXIT_OK, err, fail_input, say
from suite.cli.options import BACKEND_CHOICES


def ab(
    base: Annotated[str, typer.Option(help="the base commit (a ref or sha in --repo)")],
    head: Annotated[str, typer.Option(help="the head commit; the same as --base for an A/A run (calibration)")],
    workloads: Annotated[list[str], typer.Option("--workloads", "-w", help="workloads to measure (repeat)")],
    repo: Annotated[Path, typer.Option(help="the git repository holding both commits")] = Path("."),
    out: Annotated[Path, typer.Option(help="working folder: worktrees, venvs, base/ and head/ results")] = Path("ab"),
    rounds: Annotated[int, typer.Option(min=1, help="blocks per side (one run per workload each)")] = 10,
    order: Annotated[str, typer.Option(help="alternate (AB BA AB ...) | random (a seeded coin per round)")] = "alternate",
    seed: Annotated[int, typer.Option(help="seed of the random order")] = 0,
    backend: Annotated[str, typer.Option(help=BACKEND_CHOICES)] = "torch",
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads per process (set it: neighbours)")] = None,
    nproc: Annotated[int, typer.Option(min=1, help="processes per run (torchrun)")] = 1,
    set_: Annotated[list[str] | None, typer.Option("--set", help="spec override for both sides, e.g. "
                                                   "throughput.measure_steps=300")] = None,
    deps: Annotated[str, typer.Option(help="install: pip install each commit into its own venv (shared pip cache) | "
                                      "shared: each venv sees this interpreter's packages, its own code")] = "install",
    extras: Annotated[str, typer.Option(help="extras to install with --deps install, e.g. deepspeed")] = "",
    offline: Annotated[bool, typer.Option(help="--deps install without a package index: each venv sees this "
                                          "interpreter's packages underneath its own; pip --no-index")] = False,
    find_links: Annotated[list[str] | None, typer.Option(help="--deps install: a folder of wheels pip may install "
                                                         "from (repeat; pip --find-links)")] = None,
    lockstep: Annotated[bool, typer.Option(help="run both sides at once, alternating step by step (--no-lockstep: "
                                           "one side after the other in blocks)")] = True,
    runs_per_block: Annotated[int, typer.Option(min=1, help="runs (seeds) per process; >1 amortises start-up, "
                                                "but runs of one process share its state")] = 1,
) -> None:
    """Run two commits alternately on this machine in throughput mode; each side's results in its own folder."""
    from suite.compare import ab as ab_mod
    from suite.compare import ab_plan

    plan = ab_plan.ABPlan(repo=repo.resolve(), out=out, workloads=list(workloads), rounds=rounds, order=order,
                         seed=seed, backend=backend, threads=threads, sets=list(set_ or []), nproc=nproc, deps=deps,
                         extras=extras, offline=offline, find_links=list(find_links or []), lockstep=lockstep,
                         runs_per_block=runs_per_block)
    try:
        manifest = ab_mod.run_ab(plan, base, head, log=lambda line: err.print(line, markup=False, highlight=False))
    except ab_plan.ABError as e:
        raise fail_input(str(e)) from None
    bad = [b for b in manifest["blocks"] if b["exit_code"] != 0]
    say(f"A/B written under {out}/: base {manifest['sides']['base']['sha'][:12]} -> {out}/base, head "
        f"{manifest['sides']['head']['sha'][:12]} -> {out}/head; next: trainbench compare --baseline {out}/base "
        f"--candidate {out}/head")
    if bad:
        err.print(f"{len(bad)} block(s) did not exit 0 (see the result files' status)", markup=False)
    raise typer.Exit(EXIT_FAIL if bad else EXIT_OK)


def register(app: typer.Typer) -> None:
    app.command()(ab)
