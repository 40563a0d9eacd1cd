"""How long `trainbench compare` takes on 10,000 result files (and where the time goes).

Writes a synthetic but realistically sized results tree (the real cv/digits_cnn spec in every config, a
60-point eval curve, ~9 KB a file): N candidate result files over N/5 (workload, backend, hardware) groups of
5 seeds, and one promoted baseline file per group; then times compare end to end (read, group, test, render
Markdown and JSON) on the lean reader and on the full-schema (`--validate`) reader, best of --repeat.

    PYTHONPATH=. python benchmarks/compare_scale.py [--files 10000] [--repeat 3] [--limit-s 5]

Files are read from the page cache (they were just written): this measures compare, not the disk.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import pstats
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.sim

from benchmarks.sim.results import make_result  # noqa: E402
from suite.compare import model as compare_model  # noqa: E402
from suite.compare import output as compare_output  # noqa: E402
from suite.compare import tta as cmp  # noqa: E402
from suite.registry import find_workload  # noqa: E402
from suite.results import baselines as bl  # noqa: E402
from suite.results.record import EvalPoint, GitInfo, HardwareInfo, Result, result_path  # noqa: E402
from suite.specload import load_spec  # noqa: E402

BACKENDS = ("torch", "deepspeed", "megatron", "npu")
HARDWARE = ("cpu-amd-epyc-7b13-16c", "nvidia-h200-x1", "nvidia-h200-x8", "ascend-910b-x8", "nvidia-a100-x8")


def make(seed: int, group: int, rng: random.Random, spec: dict, slow: float) -> Result:
    tps = 0.01 * slow * math.exp(rng.gauss(0, 0.03))
    steps = max(20, round(1000 * math.exp(rng.gauss(0, 0.05)) / 20) * 20)
    curve = [EvalPoint(step=s, samples=s * 64, elapsed_s=s * tps * 1.05, train_s=s * tps,
                       metrics={"accuracy": min(0.99, 0.1 + s / steps * 0.87), "loss": 2.3 / (1 + s / 100)})
             for s in range(0, steps + 1, max(1, steps // 60))]
    return make_result(
        run_id=f"{group:05d}{seed:03d}", started_at=datetime(2026, 12, 1, tzinfo=UTC) + timedelta(seconds=group * 10 + seed),
        workload=f"cv/bench_{group // (len(BACKENDS) * len(HARDWARE)):04d}" + ("_slowed" if group % 10 == 0 else ""), workload_version=1, spec_hash="0123456789abcdef",
        backend=BACKENDS[group % len(BACKENDS)], config={"spec": spec, "overrides": {}, "variant": None, "threads": 16},
        parallel={"dp": 1}, status="reached", time_to_target_s=steps * tps * 1.05, train_s=steps * tps,
        eval_s=steps * tps * 0.05, init_s=2.0, total_s=steps * tps * 1.05, steps=steps, samples=steps * 64,
        steps_to_target=steps, samples_to_target=steps * 64, final_metrics=curve[-1].metrics,
        throughput={"samples_per_s": 64 / tps, "data_wait_fraction": 0.01},
        step_time_s={"p50": tps, "p90": tps * 1.1, "p99": tps * 1.3, "mean": tps, "first": tps * 5, "count": steps},
        flops_per_sample=1e6, mfu=0.3 / slow, memory={"host_peak_rss_bytes": 2**30, "source": "getrusage"},
        eval_curve=curve, hardware=HardwareInfo(
            slug=HARDWARE[(group // len(BACKENDS)) % len(HARDWARE)], device_type="cuda", device_name="bench",
            device_count=1, cpu_model="bench cpu", cpu_cores=16),
        software={"torch": "2.13.0", "python": "3.11", "trainbench": "0.1.0"},
        git=GitInfo(sha="0" * 40, dirty=False, branch="main"), seed=seed,
    )


def build(root: Path, files: int) -> tuple[Path, Path]:
    spec = load_spec(find_workload("cv/digits_cnn")).canonical()
    rng = random.Random(0)
    groups = files // 5
    cand, base_results, baselines = root / "candidate", root / "base-results", root / "baselines"
    for g in range(groups):
        slow = 1.2 if g % 10 == 0 else 1.0  # one group in ten (workload name *_slowed) really regresses
        for seed in range(5):
            for side, factor in ((cand, slow), (base_results, 1.0)):
                r = make(seed, g, rng, spec, factor)
                path = result_path(side, r)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(r.model_dump_json(indent=1))  # no fsync: set-up, not the thing measured
    for hw in HARDWARE:  # one promote per machine, as CI does (promote refuses mixed hardware)
        for b in bl.build_baselines(bl.load_paths([base_results / hw]).records):
            bl.write_baseline(baselines, b)
    return baselines, cand


def timed(baselines: Path, cand: Path, validate: bool) -> tuple[float, compare_model.Report]:
    t0 = time.perf_counter()
    report = cmp.compare([baselines], [cand], validate=validate)
    compare_output.to_markdown(report)
    compare_output.to_json(report)
    return time.perf_counter() - t0, report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--limit-s", type=float, default=5.0, help="exit 1 if the lean path's best time exceeds this")
    ap.add_argument("--dir", type=Path, help="build the tree here and keep it (reused when it exists)")
    ap.add_argument("--profile", action="store_true", help="print the top of a cProfile of one lean compare")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="compare-scale-") as tmp:
        t0 = time.perf_counter()
        root = args.dir or Path(tmp)
        if args.dir and (root / "baselines").is_dir():
            baselines, cand = root / "baselines", root / "candidate"
        else:
            baselines, cand = build(root, args.files)
        n_cand = sum(1 for _ in cand.rglob("*.json"))
        n_base = sum(1 for _ in baselines.rglob("*.json"))
        size = sum(p.stat().st_size for p in cand.rglob("*.json")) / n_cand
        print(f"built {n_cand} candidate result files (~{size / 1024:.1f} KB each) and {n_base} baseline files "
              f"in {time.perf_counter() - t0:.1f} s")
        out: dict[str, float] = {}
        for validate in (False, True):
            best, report = min((timed(baselines, cand, validate) for _ in range(args.repeat)), key=lambda x: x[0])
            name = "full schema (--validate)" if validate else "lean reader (default)"
            out[name] = best
            c = report.counts
            print(f"{name:26s}: {best:6.2f} s best of {args.repeat} for {report.candidate_files} + "
                  f"{report.baseline_files} files -> {len(report.pairs)} pairs, {c['regressed']} regressed, "
                  f"{c['no significant change']} unchanged, exit {report.exit_code}")
        slowed = [p for p in report.pairs if p.workload.endswith("_slowed")]
        others = [p for p in report.pairs if not p.workload.endswith("_slowed")]
        caught = sum(p.verdict == "regressed" for p in slowed)
        false = sum(p.verdict == "regressed" for p in others)
        print(f"  20% slower step time: {caught}/{len(slowed)} flagged; pure noise: {false}/{len(others)} flagged "
              f"({false / max(1, len(others)):.1%}; each gating metric's own rate is at most alpha/2 = 2.5%)")
        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(timed, baselines, cand, False)
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(18)
            print(s.getvalue())
    lean = out["lean reader (default)"]
    verdict = "within" if lean <= args.limit_s else "OVER"
    print(f"lean path {lean:.2f} s: {verdict} the {args.limit_s:g} s limit")
    return 0 if lean <= args.limit_s else 1


if __name__ == "__main__":
    sys.exit(main())
