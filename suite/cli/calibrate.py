"""`trainbench calibrate`: an A/A noise floor from two result folders of the same commit."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from suite.cli.common import EXIT_OK, emit_json, fail_input, say


def calibrate(
    a: Annotated[Path, typer.Option("--a", help="results of the first side of an A/A run (same commit)")],
    b: Annotated[Path, typer.Option("--b", help="results of the second side")],
    to: Annotated[Path, typer.Option(help="baselines folder the floor is stored in")] = Path("baselines"),
    alpha: Annotated[float, typer.Option(help="level of the interval")] = 0.05,
    min_steps: Annotated[int, typer.Option(min=1, help="fewest measured steps per run")] = 20,
    min_runs: Annotated[int, typer.Option(min=2, help="fewest runs per side")] = 4,
    json_: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Measure each workload's noise floor on this runner from an A/A comparison and store it with the baselines."""
    from suite.compare import ab_verdict as compare_ab
    from suite.results.baselines import checkout_sha, load_paths
    from suite.results.noise_floor import AAMeasurement, NoiseFloor, floor_from_aa, write_floor

    if not 0 < alpha < 1:
        raise fail_input(f"--alpha {alpha}: must be between 0 and 1")
    try:
        la, lb = load_paths([a], strict=True), load_paths([b], strict=True)
        if not compare_ab.check_modes(la, lb):
            raise compare_ab.CompareInputError(f"{a}, {b}: no throughput results (run `trainbench ab --base X --head X`)")
        ga, gb = compare_ab.groups(la, "first", min_steps), compare_ab.groups(lb, "second", min_steps)
    except ValueError as e:
        raise fail_input(str(e)) from None
    if set(ga) != set(gb):
        raise fail_input(f"the two sides measured different workloads/hardware: {sorted(map(str, set(ga) ^ set(gb)))}")
    rows = []
    for key in sorted(ga, key=lambda k: (k.workload, k.backend)):
        x, y = ga[key], gb[key]
        if min(len(x.steps), len(y.steps)) < min_runs:
            raise fail_input(f"{key.workload}: {len(x.steps)} and {len(y.steps)} runs; at least {min_runs} a side")
        if x.spec_hashes != y.spec_hashes:
            raise fail_input(f"{key.workload}: the sides ran different specs: an A/A run uses one commit twice")
        iv = compare_ab.ratio_interval(x.steps, y.steps, alpha, paired=compare_ab.paired(x, y))
        floor = NoiseFloor(
            hardware=key.hardware, workload=key.workload, backend=key.backend,
            comparison_key=x.records[0].comparison, noise_floor=floor_from_aa(iv.ratio, iv.ci_low, iv.ci_high),
            aa=AAMeasurement(ratio=iv.ratio, ci_low=iv.ci_low, ci_high=iv.ci_high, runs_per_side=len(x.steps),
                             steps_per_run=min(map(len, x.steps + y.steps))),
            measured_at=datetime.now(UTC).isoformat(timespec="seconds"), git_sha=checkout_sha())
        path = write_floor(to, floor)
        rows.append({"workload": key.workload, "hardware": key.hardware, "backend": key.backend,
                     "noise_floor": floor.noise_floor, "aa_ratio": iv.ratio, "ci": [iv.ci_low, iv.ci_high],
                     "path": str(path)})
    if json_:
        emit_json(rows)
    else:
        for r in rows:
            say(f"{r['workload']} on {r['hardware']} ({r['backend']}): A/A x{r['aa_ratio']:.4f} "
                f"[{r['ci'][0]:.4f}, {r['ci'][1]:.4f}] -> noise floor {r['noise_floor']:.1%}, written to {r['path']}")
    raise typer.Exit(EXIT_OK)


def register(app: typer.Typer) -> None:
    app.command()(calibrate)
