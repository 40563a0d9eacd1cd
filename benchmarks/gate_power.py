"""How often does the throughput A/B gate catch a 5% slower step, and how often does it cry wolf?

Two parts, both at the PR workflow's settings (scripts/ci/bench_ab.sh: lockstep rounds, paired two-level
bootstrap, 95% interval, the noise floor):

  simulate   >= 1,000 A/A and >= 1,000 A/B comparisons from benchmarks/sim/ab.py's noise model, its spreads
             either given or estimated from real A/A results (--noise-from DIR, e.g. the real part's output);
  real       `trainbench ab` for real on this machine against a throw-away git repository (benchmarks/sim/git_repo.py):
             head = base + a sleep (--inject sleep) or a busy spin of that much CPU time (--inject spin) in the
             CNN's forward of 5% of the measured median step, and head = base (A/A). Each session runs
             --rounds-real x --runs-per-block runs a side (a fresh process pair per round, who starts
             alternating); the runs are cut into disjoint comparisons of --per paired runs each, every one decided
             as `compare` decides. --clock cpu times each step by the process's CPU time
             (`throughput.clock: cpu`), which leaves out the waits for a core on a shared machine.

  PYTHONPATH=. python benchmarks/gate_power.py simulate [--comparisons 1000] [--noise-from DIR]
  PYTHONPATH=. python benchmarks/gate_power.py cut DIR [DIR ...] [--per 4]   # sessions on disk, finished or not
  PYTHONPATH=. python benchmarks/gate_power.py real [--sessions 1] [--rounds-real 4] [--runs-per-block 10]
        [--clock wall|cpu] [--inject sleep|spin] [--only aa|ab] [--out DIR]

Prints one JSON object; the figures and the machine's load (uptime) go into the report. Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.sim.ab import Noise, simulate  # noqa: E402
from suite.compare import ab_verdict as compare_ab  # noqa: E402
from suite.compare import model as compare_model  # noqa: E402


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def estimate_noise(results: Path) -> Noise:
    """Spreads of a real A/A run (base/ and head/ under `results`): rounds from the runs' shared level, runs from
    the paired log-ratio, steps from the within-run spread, outliers from steps > 1.5x their run's median."""
    from suite.results.baselines import load_paths

    sides = []
    for name in ("base", "head"):
        loaded = load_paths([results / name])
        groups = compare_ab.groups(loaded, name, 1)
        (g,) = groups.values()
        sides.append([np.asarray(s) for s in g.steps])
    n = min(len(sides[0]), len(sides[1]))
    med = np.array([[np.median(r) for r in side[:n]] for side in sides])
    log_ratio = np.log(med[1] / med[0])
    run_sd = float(np.std(log_ratio, ddof=1) / np.sqrt(2)) if n > 2 else 0.01
    round_sd = float(np.std(np.log(med.mean(axis=0)), ddof=1)) if n > 2 else 0.05
    steps = [np.log(r / np.median(r)) for side in sides for r in side]
    flat = np.concatenate(steps)
    mad = float(np.median(np.abs(flat)) * 1.4826)
    outlier_p = float(np.mean(flat > np.log(1.5)))
    # the share of the step noise that step i of both sides have in common (lockstep neighbours in time):
    # the mean within-run rank correlation of the paired steps, robust to the outliers
    rho = float(np.mean([_rank_corr(sides[0][i], sides[1][i]) for i in range(n)
                         if len(sides[0][i]) == len(sides[1][i])] or [0.0]))
    rho = min(max(rho, 0.0), 0.95)
    return Noise(round_sd=round_sd, run_sd=run_sd, step_sd=mad * float(np.sqrt(1 - rho)), outlier_p=outlier_p,
                 moment_sd=mad * float(np.sqrt(rho)))


def _rank_corr(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def run_simulation(args: argparse.Namespace) -> dict:
    noise = estimate_noise(args.noise_from) if args.noise_from else Noise(args.round_sd, args.run_sd, args.step_sd,
                                                                           args.outlier_p, args.moment_sd)
    rng = np.random.default_rng(args.seed)
    counts = {"aa_regressed": 0, "ab_regressed": 0, "ab_suspicious": 0, "aa_suspicious": 0}
    t = time.perf_counter()
    for i in range(args.comparisons):
        for kind, slow in (("aa", 1.0), ("ab", 1.0 + args.slowdown)):
            base, head = simulate(rng, args.rounds, args.steps, slow, noise=noise)
            iv = compare_ab.ratio_interval(base, head, args.alpha, n_boot=args.n_boot, seed=i, paired=True)
            verdict = compare_ab.verdict(iv, args.floor)[0]
            counts[f"{kind}_regressed"] += verdict == "regressed"
            counts[f"{kind}_suspicious"] += verdict == "suspicious"
    n = args.comparisons
    return {
        "part": "simulate", "comparisons_each": n, "rounds": args.rounds, "steps_per_run": args.steps,
        "slowdown": args.slowdown, "noise_floor": args.floor, "alpha": args.alpha, "noise": noise.__dict__,
        "power_regressed": counts["ab_regressed"] / n, "ab_suspicious": counts["ab_suspicious"] / n,
        "aa_false_regressed": counts["aa_regressed"] / n, "aa_suspicious": counts["aa_suspicious"] / n,
        "seconds": round(time.perf_counter() - t, 1), "load": load(),
    }


def _ab(repo: Path, base: str, head: str, out: Path, args: argparse.Namespace) -> float:
    cmd = [sys.executable, "-m", "suite.cli", "ab", "--repo", str(repo), "--base", base, "--head", head,
           "-w", args.workload, "--rounds", str(args.rounds_real), "--runs-per-block", str(args.runs_per_block),
           "--threads", str(args.threads), "--deps", "shared", "--out", str(out),
           "--set", f"throughput.measure_steps={args.steps}", "--set", f"throughput.warmup_steps={args.warmup}",
           "--set", f"throughput.clock={args.clock}"]
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise SystemExit(f"trainbench ab failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - t


def _sides(out: Path) -> list[compare_ab.ABGroup]:
    from suite.results.baselines import load_paths

    return [next(iter(compare_ab.groups(load_paths([out / s]), s, 1).values())) for s in ("base", "head")]


def _cut(out: Path, per: int, floor: float, alpha: float) -> tuple[list[str], list[list[float]]]:
    """Disjoint comparisons of `per` paired runs each from one session's base/ and head/ folders: verdicts, and
    each one's [ratio, ci_low, ci_high]."""
    g = _sides(out)
    n = min(len(g[0].steps), len(g[1].steps))
    verdicts, ratios = [], []
    for lo in range(0, n - per + 1, per):
        iv = compare_ab.ratio_interval(g[0].steps[lo:lo + per], g[1].steps[lo:lo + per], alpha, paired=True)
        verdicts.append(compare_ab.verdict(iv, floor)[0])
        ratios.append([round(iv.ratio, 4), round(iv.ci_low, 4), round(iv.ci_high, 4)])
    return verdicts, ratios


def _all(out: Path, alpha: float) -> list[float]:
    """The whole session as one comparison: ratio and interval (the true effect, as well as it can be known)."""
    g = _sides(out)
    n = min(len(g[0].steps), len(g[1].steps))
    iv = compare_ab.ratio_interval(g[0].steps[:n], g[1].steps[:n], alpha, paired=True)
    return [round(iv.ratio, 4), round(iv.ci_low, 4), round(iv.ci_high, 4)]


def _measured_s(out: Path) -> float:
    """Wall seconds of measured steps per side (train_s summed), whatever clock the step times are in."""
    from suite.results.baselines import load_paths

    return round(sum(json.loads(Path(r.source).read_text())["train_s"] for r in load_paths([out / "base"]).records), 1)


def run_real(args: argparse.Namespace) -> dict:
    from benchmarks.sim.git_repo import make_repo

    work = args.out.resolve()
    work.mkdir(parents=True, exist_ok=True)
    # the median step of this machine, now: the injected sleep is 5% of it
    probe_repo, base, _ = make_repo(work / "probe", None)
    probe = work / "probe-ab"
    args_probe = argparse.Namespace(**{**vars(args), "rounds_real": 1, "runs_per_block": 2})
    _ab(probe_repo, base, base, probe, args_probe)
    from suite.results.baselines import load_paths

    (group,) = compare_ab.groups(load_paths([probe / "base"]), "base", 1).values()
    steps = np.concatenate([np.asarray(r) for r in group.steps])
    median_s = float(np.median(steps))
    sleep_s = args.slowdown * median_s
    out: dict = {"part": "real", "workload": args.workload, "clock": args.clock, "inject": args.inject,
                 "median_step_s": median_s, "injected_s": sleep_s, "threads": args.threads,
                 "steps_per_run": args.steps, "rounds": args.rounds_real, "runs_per_block": args.runs_per_block,
                 "runs_per_comparison": args.per, "noise_floor": args.floor, "load_before": load(), "sessions": []}
    out["cpus"] = sorted(os.sched_getaffinity(0))  # e.g. `taskset -c 0` keeps the sessions on one core
    kinds = [k for k in (("aa", None), ("ab", sleep_s)) if args.only in (None, k[0])]
    progress = work / "gate_power_real.json"
    # the kinds interleave (aa0 ab0 ab1 aa1 aa2 ab2 ...), so a drift of the machine over the hours hits both alike;
    # the figures so far are rewritten after every session, so a stopped benchmark keeps what it measured
    for s in range(args.sessions):
        for kind, slow in (kinds if s % 2 == 0 else kinds[::-1]):
            repo, base, head = make_repo(work / f"{kind}{s}", slow, spin=args.inject == "spin")
            ab_out = work / f"{kind}{s}-ab"
            before = load()
            seconds = _ab(repo, base, head, ab_out, args)
            verdicts, ratios = _cut(ab_out, args.per, args.floor, args.alpha)
            out["sessions"].append({"kind": kind, "seconds": round(seconds, 1), "verdicts": verdicts,
                                    "ratios": ratios, "all_runs": _all(ab_out, args.alpha), "results": str(ab_out),
                                    "measured_s_per_side": _measured_s(ab_out), "load_before": before,
                                    "load": load()})
            shutil.rmtree(work / f"{kind}{s}", ignore_errors=True)  # the repository copy; results stay
            _tally(out)
            tmp = progress.with_suffix(".tmp")
            tmp.write_text(json.dumps(out, indent=1) + "\n")
            tmp.replace(progress)
    out["load_after"] = load()
    return out


def _tally(out: dict) -> None:
    for kind in ("aa", "ab"):
        v = [x for s in out["sessions"] if s["kind"] == kind for x in s["verdicts"]]
        out[f"{kind}_comparisons"] = len(v)
        out[f"{kind}_regressed"] = sum(x == "regressed" for x in v)
        out[f"{kind}_suspicious"] = sum(x == "suspicious" for x in v)


def run_cut(args: argparse.Namespace) -> dict:
    """The verdicts of sessions already on disk (finished or not: every run written so far), e.g. a real part
    that was stopped: each folder is one `trainbench ab` output (base/, head/)."""
    out: dict = {"part": "cut", "runs_per_comparison": args.per, "noise_floor": args.floor, "load": load(),
                 "sessions": []}
    for folder in args.folders:
        verdicts, ratios = _cut(folder, args.per, args.floor, args.alpha)
        g = _sides(folder)
        out["sessions"].append({"results": str(folder), "runs": [len(g[0].steps), len(g[1].steps)],
                                "verdicts": verdicts, "ratios": ratios, "all_runs": _all(folder, args.alpha),
                                "measured_s_per_side": _measured_s(folder)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=("simulate", "real", "cut"))
    ap.add_argument("folders", nargs="*", type=Path, help="cut: `trainbench ab` output folders")
    ap.add_argument("--comparisons", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=10, help="simulate: rounds a comparison (the workflow's ROUNDS)")
    ap.add_argument("--steps", type=int, default=200, help="measured steps a run (the spec's default)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--slowdown", type=float, default=0.05)
    ap.add_argument("--floor", type=float, default=compare_model.DEFAULT_THROUGHPUT_FLOOR)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--round-sd", type=float, default=0.05)
    ap.add_argument("--run-sd", type=float, default=0.01)
    ap.add_argument("--step-sd", type=float, default=0.05)
    ap.add_argument("--outlier-p", type=float, default=0.01)
    ap.add_argument("--moment-sd", type=float, default=0.0, help="simulate: step noise shared by both sides' step i")
    ap.add_argument("--noise-from", type=Path, help="estimate the noise from a real A/A folder (base/, head/)")
    ap.add_argument("--workload", default="cv/digits_cnn")
    ap.add_argument("--sessions", type=int, default=1, help="real: `trainbench ab` sessions per kind")
    ap.add_argument("--rounds-real", type=int, default=4, help="real: rounds (process pairs) a session")
    ap.add_argument("--runs-per-block", type=int, default=10, help="real: runs a side per round")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="real: throughput.clock of the runs")
    ap.add_argument("--inject", choices=("sleep", "spin"), default="sleep", help="real: how head is slower")
    ap.add_argument("--only", choices=("aa", "ab"), help="real: only the A/A or only the A/B sessions")
    ap.add_argument("--per", type=int, default=4, help="real: paired runs per comparison")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/gate_power"))
    args = ap.parse_args()
    parts = {"simulate": run_simulation, "real": run_real, "cut": run_cut}
    result = parts[args.part](args)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
