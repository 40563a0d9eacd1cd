"""`trainbench plan WORKLOAD --backend B --world N`: the spec's declared layout at full size, per rank, without
the hardware (suite/plan/). Exit 0 when it divides and fits, 2 naming the first thing that does not."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from suite.cli.common import emit_json, fail_input, out

HELP = """Lay a workload's declared layout out at full size, per rank, without the hardware.

The spec's `parallel:` block (fsdp, tp, pp, ep, ac) is read as each engine holds it: fsdp=N is FSDP2 (torch),
torchtitan's FSDP, ZeRO-3 (deepspeed) or Megatron's distributed optimizer. For one rank of each pipeline stage it
prints the bytes of parameters, gradients and optimizer state, the activations of the micro-batches in flight at
the recipe's micro-batch and checkpointing, the step's peak, and the collectives of one optimizer step with the
bytes the rank sends. The torch backend's FSDP2 shards are built for real on meta tensors under a fake process
group of N ranks; the other engines' are arithmetic from the layout (they build through their own initialisers,
which need the devices). Exit 2 names the first thing that does not divide (world, batch, heads, experts,
stages), that the engine cannot express, or that does not fit --device-memory-gb.

Examples:\n
  trainbench plan nlp/llama31_8b --backend megatron --world 8\n
  trainbench plan nlp/deepseekv3_671b --backend torchtitan --world 256 --device-memory-gb 288 --json\n
  trainbench plan nlp/llama31_8b --backend deepspeed --world 16 --set parallel.fsdp=16
"""


def plan(
    workload: Annotated[str, typer.Argument(help="a workload name (nlp/llama31_8b) or spec path")],
    backend: Annotated[str, typer.Option(help="torch, torchtitan, deepspeed or megatron")] = "torch",
    world: Annotated[int, typer.Option(help="the number of ranks (devices) to lay the layout over", min=1)] = 8,
    device_memory_gb: Annotated[float, typer.Option(
        help="memory of one device in GB (1e9 bytes): 80 for an H100 SXM, 288 for a GB300", min=0.001)] = 80.0,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a spec field: --set parallel.pp=2")] = None,
    variant: Annotated[str | None, typer.Option(help="a named override set from the spec, e.g. tiny")] = None,
    json_: Annotated[bool, typer.Option("--json", help="the plan (or the refusal and what was laid out) as JSON")] = False,
) -> None:
    from suite import registry
    from suite.plan.memory import PlanError
    from suite.plan.memory import plan as lay_out
    from suite.spec import SpecError, parse_override
    from suite.specload import load_spec

    try:
        path = registry.find_workload(workload)
        spec = load_spec(path, dict(parse_override(s) for s in set_ or []), variant)
    except (registry.RegistryError, SpecError) as e:
        raise fail_input(str(e)) from None
    try:
        result = lay_out(spec, backend, world, int(device_memory_gb * 1e9))
    except PlanError as e:
        if json_:
            emit_json({"ok": False, "error": str(e), "plan": e.plan.as_dict() if e.plan is not None else None})
        elif e.plan is not None:
            _print(e.plan)
        raise fail_input(str(e)) from None
    if json_:
        emit_json({"ok": True, "error": None, "plan": result.as_dict()})
        return
    _print(result)


def _gb(n: float) -> str:
    return f"{n / 1e9:,.2f}"


def _wide() -> Console:
    """stdout at no less than 180 columns: the plan's tables have 13 columns (Rich only narrows to the console)."""
    return Console(width=max(out.width, 180), file=out.file)


def _print(p) -> None:  # noqa: ANN001 - suite.plan.memory.Plan, imported late
    out.print(f"{escape(p.workload)} under {escape(p.backend)} on {p.world} ranks: {escape(p.layout)}, micro-batch "
              f"{p.micro_batch} x {p.micro_batches} per step, {p.precision}", highlight=False)
    out.print(f"mapping: {escape(p.mapping)}", highlight=False)
    out.print(f"how: {escape(p.method)}", highlight=False)
    table = Table(title=f"one rank of each stage, GB (device: {p.device_bytes / 1e9:.0f} GB)")
    for col in ("stage", "layers", "params", "weights", "grads", "optimizer", "gathered", "activations (in flight)",
                "recompute", "logits", "no-sync grads", "peak", "phase"):
        table.add_column(col)
    for s in p.stages:
        table.add_row(str(s.stage), f"{s.layers[0]}-{s.layers[1] - 1}", f"{s.params / 1e9:,.3f} B",
                      _gb(s.weights_bytes), _gb(s.grads_bytes), _gb(s.optimizer_bytes), _gb(s.gathered_bytes),
                      f"{_gb(s.activations_bytes)} ({s.in_flight})", _gb(s.recompute_bytes), _gb(s.logits_bytes),
                      _gb(s.no_sync_grads_bytes), _gb(s.peak_bytes), s.phase)
    _wide().print(table)  # a wide table whole, never squeezed to the terminal (its cells stay greppable)
    coll = Table(title="collectives of one optimizer step, per rank (bytes it sends)")
    for col in ("stage", "collective", "group", "times", "GB sent"):
        coll.add_column(col)
    for s in p.stages:
        for c in s.collectives:
            coll.add_row(str(s.stage), escape(c.name), c.group, str(c.per_step), _gb(c.bytes_per_step))
    _wide().print(coll)
    for note in p.notes:
        out.print(f"note: {escape(note)}", highlight=False)
    run = "yes" if p.run_refusal is None else f"not yet: {p.run_refusal}"
    out.print(f"`trainbench run` under {escape(p.backend)}: {escape(run)}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("plan", help=HELP)(plan)

