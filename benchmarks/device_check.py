"""Device check for a new GPU/NPU runner, run it first on a runner. In order, within --time-limit-s:
the fingerprint; the measured GEMM peak per dtype the device offers (fp32, tf32/hf32, bf16, fp16) beside the
table's; time to target of a small workload (cv/digits_cnn, to its own target, through the real harness); then
every full-tier workload's tiny variant (and ALSO_ON_DEVICE's) x every backend that supports it, a few steps in the spec's precision
with torch.compile, with the GPT memory estimate beside the measured peak and the full spec's "fits the device"
verdict for this device's memory. GRPO's rows carry the step's time by phase; under `verl` (veRL's own trainer, where
veRL and its vLLM rollout import) a few steps, its phases beside the suite's own; elsewhere the skip says why.

    PYTHONPATH=$PWD python benchmarks/device_check.py                       # cuda or npu: < 8 min on one H200
    PYTHONPATH=$PWD python benchmarks/device_check.py --device cpu --no-compile --steps 3   # dry mode (CPU)

The JSON goes to --out, by default $OUT/device_check.json when OUT is set (a lent device machine), else
./device_check.json.

Per run it prints and records: step time (p50, device events on accelerators), MFU against the table peak and
against the measured GEMM peak (with the dtype each op class ran in), the FLOPs cross-check (the workload's
analytic count against FlopCounterMode on one real batch), energy (NVML), peak memory. One JSON file
(--out), and a non-zero exit on any failure: a run that errors or diverges, a FLOPs count outside
--flops-tolerance, a missing data set, or the time limit. A backend that is not installed is skipped with
its reason (listed, not a failure), as is a workload whose optional extra is not installed (the fine-tune's
peft / safetensors / pyarrow); a pair the backend does not support is left out, as `run --tier` does.
Data sets: the full tier reads from TRAINBENCH_DATA or a spec's data.path; `--set-json` points specs elsewhere.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from suite import devices, registry
from suite.backends.matrix import unsupported_reason
from suite.data.base import DataMissing
from suite.data.locate import data_root
from suite.harness import RunRequest, run
from suite.measure import environment, flops, llm_memory, memory, peaks
from suite.specload import load_spec
from suite.workloads.contract import Context

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_titan import TITAN_PUBLISHED_8B, titan_llama8b_row  # noqa: E402 - beside this script

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2
TTA_WORKLOAD = "cv/digits_cnn"  # installed with the package's data (scikit-learn); reaches 0.97 in seconds
# the dtypes whose GEMM peak is measured, per device type (fp8 needs scaled GEMMs: not a plain mm)
GEMM_DTYPES = {"cuda": ("fp32", "tf32", "bf16", "fp16"), "npu": ("fp32", "hf32", "bf16", "fp16"),
               "cpu": ("fp32", "bf16")}
MAX_GRAPH_BATCHES = 16
CPU_PRECISION = {"bf16": "fp32", "fp16": "fp32", "bf16_master": "fp32", "fp8": "fp32"}  # dry mode: what a CPU does well


# below the full tier, checked on the device too: GRPO's KV-cached generation and its update (issue 32; the full-tier
# GRPO recipe, rl/gsm8k_grpo, is covered by its tiny variant on FIXTURES' files)
ALSO_ON_DEVICE = ("rl/arithmetic_grpo", "rec/movielens_hstu", "rec/movielens_dcnv2")  # rec: issue 46, fixture files
# veRL's trainer (where it imports: `pip install 'verl[vllm]==0.9.1'` on the device) runs the GRPO tiny variant for a few
# steps only: its start-up (Ray, workers, the vLLM engine) is most of its time. veRL 0.9.1's trainer rolls out with
# vllm, sglang or trtllm (no Hugging Face rollout); without vllm the backend says so and the pair is skipped
VERL_STEPS = 4
PHASE_KEYS = ("seconds", "rollout_s_per_step", "training_s_per_step", "weight_sync_s_per_step", "updates",
              "gen_tokens_per_s", "trained_tokens_per_s", "tokens_per_s_per_gpu", "mfu_gen", "mfu_update",
              "startup_s", "trainer_exit_code", "trainer_stopped_by_run", "source",
              # agentic GRPO (rl/qwen35_397b_grpo's tiny variant): the async overlap, staleness and the episodes' turns
              "rollout_mode", "staleness", "max_staleness", "overlap_s", "overlap_fraction", "mean_turns", "sandbox")


# tiny variants whose files a fixture writes in the real formats (no data set needed on the device): workload ->
# (the fixture's `write(folder)`, the overrides pointing the tiny variant at that folder)
FIXTURES: dict[str, tuple[str, dict[str, str]]] = {
    "rl/gsm8k_grpo": ("suite.data.rl.gsm8k_fixture:write", {"data.path": "data", "data.tokenizer": "model",
                                                         "model.checkpoint": "model"}),
    "rec/movielens_hstu": ("suite.data.rec.movielens_fixture:write", {"data.path": "."}),
    "rec/movielens_dcnv2": ("suite.data.rec.movielens_fixture:write", {"data.path": "."}),
}


def fixture_sets(name: str) -> dict[str, str]:
    """The overrides that point `name`'s tiny variant at fixture files written once into a temporary folder."""
    if name not in FIXTURES:
        return {}
    import importlib
    import tempfile

    target, paths = FIXTURES[name]
    folder = Path(tempfile.gettempdir()) / f"trainbench-fixture-{name.replace('/', '_')}"
    if not folder.is_dir():
        module, fn = target.split(":")
        getattr(importlib.import_module(module), fn)(folder)
    return {key: str(folder / sub) for key, sub in paths.items()}


def full_tier() -> list[str]:
    names = sorted(name for name, path in registry.workload_files().items() if "full" in load_spec(path).tiers)
    return names + [n for n in ALSO_ON_DEVICE if n in registry.workload_files() and n not in names]


def spec_precision(spec: Any, device_type: str) -> str:
    """The spec's precision (a `precision` field where the spec has one), mapped to what a CPU does in dry mode."""
    precision = getattr(spec, "precision", None) or "fp32"
    return CPU_PRECISION.get(precision, precision) if device_type == "cpu" else precision


def flops_cross_check(spec: Any, device: torch.device) -> dict[str, Any]:
    """Analytic FLOPs per sample against FlopCounterMode over one real batch of the workload (model on `device`)."""
    torch.manual_seed(0)
    workload = registry.task_class(spec.task)(spec, Context(data_root=data_root(), seed=0, device=device))
    model = workload.build_model().to(device)
    workload.attach(model)
    # graphs vary in size and the analytic figure is per graph of average size: count several batches there
    n_batches = MAX_GRAPH_BATCHES if "avg_nodes" in getattr(workload, "meta", {}) else 1
    batches = iter(workload.train_batches(0, 1))
    counted = samples = 0.0
    for _ in range(n_batches):
        batch = next(batches)
        counted += flops.count_train_flops(workload.loss, model, batch)
        samples += workload.batch_samples(batch)
    analytic = float(workload.flops_per_sample())
    return {"analytic_per_sample": analytic, "counted_per_sample": counted / max(1.0, samples),
            "batches": n_batches, "relative_error": flops.relative_error(analytic, counted / max(1.0, samples))}


def one_run(name: str, backend: str, args: argparse.Namespace, device_type: str) -> dict[str, Any]:
    sets = {**fixture_sets(name), **args.set_json.get(name, {})}
    steps = min(args.steps, VERL_STEPS) if backend == "verl" else args.steps
    sets.update({"budget.max_steps": steps, "budget.max_train_s": args.run_limit_s,
                 "eval.every_steps": steps, "schedule.total_steps": steps})
    spec = load_spec(registry.find_workload(name), sets, variant="tiny")
    precision = args.precision or spec_precision(spec, device_type)
    row: dict[str, Any] = {"workload": name, "backend": backend, "precision": precision, "compile": args.compile,
                           "steps_asked": steps}
    t = time.perf_counter()
    try:
        result, _ = run(RunRequest(spec=spec, backend=backend, precision=precision, compile=args.compile,
                                   threads=args.threads, results_dir=None, variant="tiny", overrides=sets))
    except DataMissing as e:
        row.update(status="data_missing", error=str(e), wall_s=time.perf_counter() - t)
        return row
    st = result.step_time_s
    peak = result.peak
    row.update(
        status=result.status, error=result.error, wall_s=time.perf_counter() - t, steps=result.steps,
        step_time_p50_s=st.get("p50"), step_time_first_s=st.get("first"), device_timed=bool(st.get("device_events")),
        samples_per_s=result.throughput.get("steady_samples_per_s"), mfu=result.mfu,
        mfu_measured_peak=result.mfu_measured_peak, hfu=result.hfu,
        peak_tflops=peak.flops_per_s / 1e12 if peak and peak.flops_per_s else None,
        measured_gemm_tflops=peak.measured_flops_per_s / 1e12 if peak and peak.measured_flops_per_s else None,
        peak_rule=peak.rule if peak else None,
        dtypes={c: v["dtype"] for c, v in peak.by_class.items()} if peak else {},
        energy_j=result.energy_j, memory=result.memory, warnings=result.warnings,
    )
    if result.phases:  # GRPO: the step's time by phase, the suite's own beside veRL's (its timing_s/* and perf/*)
        row["phases"] = {k: result.phases.get(k) for k in PHASE_KEYS if k in result.phases}
    if backend == "verl":  # veRL's own trainer ran: the FLOPs cross-check would count the suite's model again
        row["verl"] = {"init_s": result.init_s, "total_s": result.total_s, "args": result.config.get("verl")}
        return row
    if spec.model.arch in ("gpt", "llama"):
        row["memory_estimate"] = memory_row(name, spec, precision, result.memory, args.device_bytes)
    if spec.model.arch == "hf_llama" and spec.model.params().get("lora"):
        row["memory_estimate"] = lora_memory_row(name, spec, precision, result.memory, args.device_bytes)
    if result.status in ("error", "diverged", "interrupted"):
        return row
    try:
        row["flops"] = flops_cross_check(spec, devices.current().torch)
    except Exception as e:  # noqa: BLE001 - a failed count is a failed check, recorded with its reason
        row["flops"] = {"error": f"{type(e).__name__}: {e}"}
    return row


def memory_row(name: str, tiny: Any, precision: str, measured: dict[str, Any], device_bytes: int | None) -> dict:
    """The memory estimator (GPT or Llama/MoE) on the tiny run, beside what it measured, and the full spec's fit
    on this device."""
    est = llm_memory.estimate_spec(tiny, precision)
    got = measured.get("device_peak_allocated_bytes")
    row: dict[str, Any] = {"tiny_estimate_bytes": est.peak_bytes, "tiny_measured_bytes": got,
                           "tiny_ratio": est.peak_bytes / got if isinstance(got, (int, float)) and got > 0 else None}
    full = load_spec(registry.find_workload(name))
    full_est = llm_memory.estimate_spec(full)
    row.update(full_estimate_bytes=full_est.peak_bytes, full_phase=full_est.phase)
    if device_bytes:
        fit = memory.fits(full_est, device_bytes)
        row.update(full_fits=fit.fits, full_fit=fit.reason)
    return row


def missing_extras(spec: Any) -> list[str]:
    """Packages of an optional extra a spec needs that are not installed (a fine-tune: peft, safetensors, pyarrow)."""
    import importlib.util

    params = spec.model.params()
    needs = ["safetensors"] if params.get("checkpoint") else []
    needs += ["peft"] if params.get("lora") else []
    needs += ["pyarrow"] if spec.data.name == "govreport" else []
    return [n for n in needs if importlib.util.find_spec(n) is None]


def lora_memory_row(name: str, tiny: Any, precision: str, measured: dict[str, Any], device_bytes: int | None) -> dict:
    """The LoRA estimator on the tiny run (one device) and the full spec's fit in the reference's layout."""
    from suite.measure import memory_lora

    est = memory_lora.estimate_spec(tiny, precision)
    got = measured.get("device_peak_allocated_bytes")
    full_est = memory_lora.estimate_spec(load_spec(registry.find_workload(name)), **memory_lora.REFERENCE_LAYOUT)
    row: dict[str, Any] = {"tiny_estimate_bytes": est.peak_bytes, "tiny_measured_bytes": got,
                           "tiny_ratio": est.peak_bytes / got if isinstance(got, (int, float)) and got > 0 else None,
                           "full_estimate_bytes": full_est.peak_bytes, "full_phase": full_est.phase,
                           "full_layout": memory_lora.REFERENCE_LAYOUT}
    if device_bytes:
        fit = memory.fits(full_est, device_bytes)
        row.update(full_fits=fit.fits, full_fit=fit.reason)
    return row


def device_memory_bytes(hardware: Any) -> int | None:
    """One device's memory: the accelerator's (the fingerprint's first device), the host's in dry mode."""
    if hardware.device_type == "cpu":
        return hardware.memory_bytes
    first = hardware.devices[0] if hardware.devices else {}
    return first.get("memory_bytes")


def gemm_table(device_type: str, device_name: str, measure: Any, dtypes: tuple[str, ...] | None = None,
               threads: int | None = None) -> list[dict[str, Any]]:
    """Per dtype: the measured GEMM FLOP/s (`measure(dtype) -> peaks.GemmResult`) beside the table's dense peak."""
    rows = []
    for dtype in dtypes or GEMM_DTYPES.get(device_type, ("fp32",)):
        row: dict[str, Any] = {"dtype": dtype}
        try:
            got = measure(dtype)
            row.update(measured_tflops=got.flops_per_s / 1e12, n=got.n, repeats=got.repeats, ran_as=got.dtype)
        except Exception as e:  # noqa: BLE001 - a dtype the device cannot do is a row with its reason
            row.update(measured_tflops=None, error=f"{type(e).__name__}: {e}")
        table = peaks.cpu_peak(dtype, threads) if device_type == "cpu" else peaks.lookup(device_name, dtype)
        row["table_tflops"] = table.flops_per_s / 1e12 if table else None
        row["table_source"] = table.source if table else None
        m, t = row["measured_tflops"], row["table_tflops"]
        row["measured_over_table"] = m / t if m and t else None
        rows.append(row)
    return rows


def measure_gemm_exactly(device: torch.device, budget_s: float) -> Any:
    """measure(dtype) for gemm_table: "fp32" with the TF32/HF32 switch off, "tf32" with it on (then restored)."""
    def measure(dtype: str) -> peaks.GemmResult:
        if device.type != "cuda" or dtype not in ("fp32", "tf32"):
            return peaks.measure_gemm(device, "fp32", budget_s, dtype=dtype)
        saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        try:
            return peaks.measure_gemm(device, "fp32", budget_s, dtype=dtype)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved

    return measure


def tta_run(args: argparse.Namespace) -> dict[str, Any]:
    """A small workload to its own target through the harness: time to target, steps, MFU; `reached` or a failure."""
    spec = load_spec(registry.find_workload(args.tta_workload), args.set_json.get(args.tta_workload))
    precision = spec.precision or "fp32"
    t = time.perf_counter()
    result, _ = run(RunRequest(spec=spec, backend="torch", precision=precision, compile=bool(spec.compile),
                               threads=args.threads, results_dir=None))
    return {"workload": args.tta_workload, "backend": "torch", "precision": precision, "status": result.status,
            "error": result.error, "time_to_target_s": result.time_to_target_s, "steps_to_target": result.steps_to_target,
            "train_s": result.train_s, "init_s": result.init_s, "mfu": result.mfu, "wall_s": time.perf_counter() - t,
            "target": f"{spec.target.metric} {'>=' if spec.target.mode == 'max' else '<='} {spec.target.value:g}"}


def failures_of(row: dict[str, Any], tolerance: float, dry_mode: bool = False) -> list[str]:
    out = []
    where = f"{row['workload']} / {row['backend']}"
    fit = row.get("memory_estimate") or {}
    if not dry_mode and fit.get("full_fits") is False:  # the runner cannot hold the full spec: say so now
        out.append(f"{where}: the full spec {fit['full_fit']}")
    if row["status"] not in ("reached", "budget"):
        out.append(f"{where}: {row['status']}: {str(row.get('error') or '')[:300]}")
    fl = row.get("flops")
    if fl is not None:
        if "error" in fl:
            out.append(f"{where}: FLOPs count failed: {fl['error']}")
        elif not fl["relative_error"] <= tolerance:
            out.append(f"{where}: analytic FLOPs {fl['analytic_per_sample']:.4g} vs counted "
                       f"{fl['counted_per_sample']:.4g} per sample: {fl['relative_error']:.1%} apart (> {tolerance:.0%})")
    return out


def _fmt(value: Any, spec: str = ".3g") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def table(rows: list[dict[str, Any]]) -> str:
    head = ("workload", "backend", "prec", "status", "step p50 ms", "MFU", "MFU(gemm)", "peak TF", "gemm TF",
            "flops err", "energy J", "mem GiB")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        mem = (r.get("memory") or {}).get("device_peak_reserved_bytes") or (r.get("memory") or {}).get(
            "host_peak_rss_bytes")
        fl = r.get("flops") or {}
        lines.append(" | ".join((
            r["workload"], r["backend"], r["precision"], r["status"],
            _fmt(r["step_time_p50_s"] * 1e3 if r.get("step_time_p50_s") else None),
            _fmt(r.get("mfu"), ".2%"), _fmt(r.get("mfu_measured_peak"), ".2%"), _fmt(r.get("peak_tflops")),
            _fmt(r.get("measured_gemm_tflops")), _fmt(fl.get("relative_error"), ".1%"), _fmt(r.get("energy_j")),
            _fmt(mem / 2**30 if isinstance(mem, (int, float)) else None))))
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("auto", "cuda", "npu", "cpu"), default="auto",
                   help="auto: the accelerator present; cpu: the dry mode (tiny, no accelerator needed)")
    p.add_argument("--workloads", nargs="*", default=None,
                   help="default: every full-tier workload; given with no names: none (the GEMM peaks and TTA only)")
    p.add_argument("--backends", nargs="*", default=None, help="default: every registered backend")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--precision", default=None, help="force a precision (default: each spec's)")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="eager (default: torch.compile)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--flops-tolerance", type=float, default=0.10, help="largest analytic/counted gap allowed")
    p.add_argument("--time-limit-s", type=float, default=480.0, help="the whole check; what is left is a failure")
    p.add_argument("--run-limit-s", type=float, default=120.0, help="one run's train-time budget")
    p.add_argument("--set-json", type=json.loads, default={},
                   help='per-workload spec overrides, e.g. \'{"cv/cifar10_resnet": {"data.path": "/data/cifar"}}\'')
    p.add_argument("--gemm-budget-s", type=float, default=1.0, help="seconds per dtype of the GEMM benchmark")
    p.add_argument("--tta-workload", default=TTA_WORKLOAD, help="the small workload run to its target")
    p.add_argument("--no-tta", dest="tta", action="store_false", help="skip the time-to-target run")
    p.add_argument("--no-gemm", dest="gemm", action="store_false", help="skip the GEMM peaks")
    p.add_argument("--no-llama8b", dest="llama8b", action="store_false",
                   help="skip the Llama 3.1 8B step (benchmarks/llama8b_step.py; a tiny stand-in in dry mode)")
    p.add_argument("--synthetic-data", type=Path, default=None, metavar="DIR",
                   help="write small files in each full-tier data set's real on-disk format under DIR (suite/"
                        "data/synthetic.py) and point the specs at them: a machine without the data sets (a lent device "
                        "with no network) still checks steps, MFU, FLOPs and memory; accuracy figures mean nothing")
    p.add_argument("--out", type=Path, default=None,
                   help="default: $OUT/device_check.json when OUT is set, else ./device_check.json")
    args = p.parse_args(argv)
    if args.synthetic_data is not None:
        from suite.data.synthetic.overrides import full_tier_overrides

        synthetic = full_tier_overrides(args.synthetic_data)
        args.set_json = {name: {**sets, **args.set_json.get(name, {})} for name, sets in synthetic.items()} | {
            name: sets for name, sets in args.set_json.items() if name not in synthetic}
    if args.out is None:
        args.out = Path(os.environ["OUT"]) / "device_check.json" if os.environ.get("OUT") else Path("device_check.json")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    present = devices.detect_type()
    device_type = present if args.device == "auto" else args.device
    if device_type == "cpu" and args.device == "auto":
        print("device_check: no cuda or npu device here; --device cpu runs the dry mode", file=sys.stderr)
        return EXIT_INPUT
    if device_type != present:
        print(f"device_check: --device {device_type}, but this machine's device is {present}", file=sys.stderr)
        return EXIT_INPUT
    started = time.perf_counter()
    names = full_tier() if args.workloads is None else args.workloads  # `--workloads` alone: none (GEMM, TTA only)
    backends = args.backends or sorted(registry.BACKENDS)
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    failures: list[str] = []
    dev = devices.current()
    devices.set_threads(args.threads)
    hardware = environment.hardware(dev, dev.count())
    args.device_bytes = device_memory_bytes(hardware)
    gemm: list[dict[str, Any]] = []
    if args.gemm:
        gemm = gemm_table(device_type, hardware.device_name or "", measure_gemm_exactly(dev.torch, args.gemm_budget_s),
                          threads=args.threads)
        failures += [f"GEMM {g['dtype']}: {g['error']}" for g in gemm if g.get("error")]
        print(f"[{time.perf_counter() - started:6.1f} s] GEMM peaks measured", file=sys.stderr)
    tta: dict[str, Any] | None = None
    if args.tta:
        tta = tta_run(args)
        if tta["status"] != "reached":
            failures.append(f"time to target: {tta['workload']} ended {tta['status']}, not reached: "
                            f"{str(tta.get('error') or '')[:300]}")
        print(f"[{time.perf_counter() - started:6.1f} s] {tta['workload']} to target: {tta['status']}", file=sys.stderr)
    llama8b: dict[str, Any] | None = None
    if args.llama8b:  # the 8B preset at sequence 8192, as many layers as fit, beside torchtitan's published goal
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import llama8b_step

        llama8b = llama8b_step.probe(dev.torch, hardware.device_name or "", args.device_bytes, compile_model=args.compile,
                                     threads=args.threads)
        if llama8b.get("error"):
            failures.append(f"llama 8B step: {llama8b['error'][:300]}")
        print(f"[{time.perf_counter() - started:6.1f} s] llama 8B step: {llama8b.get('layers')} layers, MFU "
              f"{_fmt(llama8b.get('mfu'), '.2%')}", file=sys.stderr)
    for backend in backends:
        avail = registry.backend_class(backend)(devices.current()).available()
        if not avail.ok:
            skipped.append({"backend": backend, "reason": f"not available: {avail.reason}"})
            continue
        for name in names:
            spec = load_spec(registry.find_workload(name), args.set_json.get(name), variant="tiny")
            reason = unsupported_reason(backend, spec)
            if reason:
                skipped.append({"backend": backend, "workload": name, "reason": f"unsupported: {reason}"})
                continue
            if lacking := missing_extras(spec):
                skipped.append({"backend": backend, "workload": name, "reason": f"needs {', '.join(lacking)} "
                                "(pip install 'trainbench[finetune]'; not among the carried wheels)"})
                continue
            if time.perf_counter() - started > args.time_limit_s:
                failures.append(f"{name} / {backend}: not run, the {args.time_limit_s:g} s time limit was reached")
                continue
            row = one_run(name, backend, args, device_type)
            rows.append(row)
            failures += failures_of(row, args.flops_tolerance, dry_mode=device_type == "cpu")
            print(f"[{time.perf_counter() - started:6.1f} s] {name} / {backend}: {row['status']}", file=sys.stderr)
    titan = None
    if device_type != "cpu" and "torchtitan" in backends and registry.backend_class("torchtitan")(dev).available().ok:
        titan = titan_llama8b_row(dev.torch, args.device_bytes, args.compile)  # issue 37: beside the published
        failures += [f"torchtitan Llama 3.1 8B: {titan['error']}"] if titan["status"] == "error" else []
    if not rows and names:
        failures.append("nothing ran: no available backend supports the chosen workloads")
    wall = time.perf_counter() - started
    if wall > args.time_limit_s:
        failures.append(f"the check took {wall:.0f} s, over its {args.time_limit_s:g} s limit")
    report = {
        "kind": "trainbench-device-check", "device_type": device_type, "dry_mode": device_type == "cpu",
        "wall_s": wall, "ok": not failures, "failures": failures, "skipped": skipped,
        "settings": {"steps": args.steps, "compile": args.compile, "flops_tolerance": args.flops_tolerance,
                     "time_limit_s": args.time_limit_s, "gemm_budget_s": args.gemm_budget_s,
                     "synthetic_data": str(args.synthetic_data) if args.synthetic_data else None},
        "hardware": hardware.model_dump(mode="json"), "software": environment.software(),
        "device_memory_bytes": args.device_bytes, "gemm": gemm, "tta": tta, "runs": rows, "llama8b_step": llama8b,
        "torchtitan_llama8b": titan,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    for g in gemm:
        print(f"GEMM {g['dtype']:5}: measured {_fmt(g['measured_tflops'])} TFLOP/s, table {_fmt(g['table_tflops'])}"
              f" ({_fmt(g['measured_over_table'], '.0%')})")
    if tta is not None:
        print(f"TTA {tta['workload']}: {tta['status']} in {_fmt(tta['time_to_target_s'])} s "
              f"({tta['steps_to_target']} steps, MFU {_fmt(tta['mfu'], '.2%')})")
    if llama8b is not None and not llama8b.get("error"):
        print(f"LLAMA 8B step: {llama8b['layers']} layers x {llama8b['seq_len']} tokens x {llama8b['micro_batch']}, "
              f"{llama8b['step_time_p50_s'] * 1e3:.1f} ms, {llama8b['tokens_per_s']:.0f} tokens/s, MFU "
              f"{_fmt(llama8b['mfu'], '.2%')} (goal: torchtitan 5,762 tokens/s/GPU FSDP bf16, 6,667 compiled, 33-39% MFU)")
    print(table(rows))
    if titan is not None:
        print(f"torchtitan {titan['workload']}: {titan['status']}, {_fmt(titan.get('tokens_per_s'))} tokens/s "
              f"({_fmt(titan.get('model_tflops'))} model TFLOP/s); published, whole model with compile: "
              f"{TITAN_PUBLISHED_8B['tokens_per_s_per_gpu']} tokens/s/GPU "
              f"({_fmt(titan.get('published_model_tflops_per_gpu'))} TFLOP/s)")
    for s in skipped:
        print(f"skipped: {s.get('workload', '*')} / {s['backend']}: {s['reason']}")
    for f in failures:
        print(f"FAILED: {f}")
    print(f"{'OK' if not failures else 'FAILED'}: {len(rows)} run(s) in {report['wall_s']:.0f} s -> {args.out}")
    return EXIT_OK if not failures else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
