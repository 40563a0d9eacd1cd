"""`trainbench env`: this machine's fingerprint, and (--peak) its table and measured GEMM peaks."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from suite.cli.common import emit_json, err, fail_input, out


def _without_import() -> dict[str, Any]:
    """Each registered backend's availability check that imports neither torch nor the engine: its options module's
    `available_installed` (suite/backends/<engine>/options.py); an engine without one is asked through its class."""
    from suite import registry
    return {name: check for name in registry.BACKENDS if (check := registry.engine_attr(name, "available_installed"))}


def env(
    json_: Annotated[bool, typer.Option("--json")] = False,
    peak: Annotated[bool, typer.Option("--peak", help="also the table peak and a measured GEMM peak")] = False,
    precision: Annotated[str, typer.Option(help="dtype for --peak: fp32 | bf16 | fp16")] = "fp32",
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads for --peak on CPU (default: all cores)")] = None,
) -> None:
    """Hardware and software fingerprint, and which backends can run here (and why not).

    Without --peak, on a host with no GPU or NPU in sight, it imports neither torch nor an engine.

    Versions then come from the installed packages; torch.threads is left out (a run records its own).

    With --peak, or where an accelerator shows (/dev/nvidia*, /dev/kfd, /dev/davinci*), torch is imported.
    """
    from suite import devices, registry
    from suite.measure import environment

    heavy = peak or bool(devices.accelerator_evidence())
    WITHOUT_IMPORT = _without_import()  # noqa: N806 - a table
    device = devices.current() if heavy else devices.Device("cpu")
    if peak:
        _env_peak(device, precision, threads, json_)
        return
    info: dict[str, Any] = {
        "hardware": environment.hardware(device, device.count()).model_dump(),
        "software": environment.software(import_torch=heavy),
        "git": environment.git_info().model_dump(),
        "backends": {},
    }
    for name in registry.BACKENDS:
        try:
            quick = None if heavy else WITHOUT_IMPORT.get(name)
            avail = quick(device.type) if quick else registry.backend_class(name)(device).available()
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


def register(app: typer.Typer) -> None:
    app.command()(env)
