"""The constructed results folders the site tests share (leaderboard, hostile text, a compare report), built from
benchmarks/sim/results.py's `site_result`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from benchmarks.sim.results import T0, site_result
from suite.compare import output as compare_output

# ---- the constructed results folders the site tests share ----------------------------------------------

WL = "cv/digits_cnn"
NEW_SHA, OLD_SHA = "c0ffee" + "1" * 34, "0ld5ha" + "2" * 34
DAY = timedelta(days=1)

# (hardware, backend, TTA per seed; None = ran out of budget) -> expected olympic mean
LEADERBOARD = [
    ("nvidia-h200-x8", "deepspeed", [8.0, 9.0, 9.5, 10.0, 10.5]),  # 9.5
    ("nvidia-h200-x8", "torch", [10.0, 11.0, 12.0, 13.0, 100.0]),  # 12.0 (the 100 s outlier is dropped)
    ("nvidia-a100-x8", "torch", [20.0, 21.0, 22.0, None, 19.0]),  # 21.0: one miss is dropped as the slowest
    ("cpu-amd-epyc-2c", "torch", [290.0, 300.0, 310.0]),  # 300.0
    ("nvidia-a100-x8", "megatron", [15.0, None, 16.0, None, 14.0]),  # two misses: infinite, ranked last
]
EXPECTED_ORDER = [(h, b) for h, b, _ in LEADERBOARD[:4]] + [("nvidia-a100-x8", "megatron")]
EXPECTED_TTA = [9.5, 12.0, 21.0, 300.0, float("inf")]


def olympic_ttas() -> list[tuple[str, str, list[float | None]]]:
    return LEADERBOARD


def write_standard(root) -> dict[str, Any]:
    """The leaderboard fixture: five current submissions, one older faster one, a second workload."""
    from suite.results.record import write_result

    paths: dict[str, Any] = {"runs": []}
    now = T0 + 10 * DAY
    for i, (hw, backend, ttas) in enumerate(LEADERBOARD):
        for seed, tta in enumerate(ttas):
            r = site_result(WL, hw, backend, seed=seed, tta_s=tta, status="reached" if tta else "budget",
                            started_at=now + timedelta(minutes=10 * i + seed), sha=NEW_SHA, evals=6,
                            mfu=0.30 + 0.02 * i)
            paths["runs"].append(write_result(root, r))
    # an older submission of h200/torch that was faster: history only, never on the index
    for seed in range(3):
        write_result(root, site_result(WL, "nvidia-h200-x8", "torch", seed=seed, tta_s=5.0 + seed,
                                       started_at=T0 + timedelta(minutes=seed), sha=OLD_SHA, evals=4))
    # a second workload, in another domain, on one hardware only
    for seed in range(3):
        write_result(root, site_result("nlp/char_gru", "nvidia-h200-x8", "torch", seed=seed, tta_s=40.0 + seed,
                                       started_at=now + timedelta(hours=5, minutes=seed), sha=NEW_SHA, evals=9,
                                       description="Jane Austen's novels, a character GRU to val loss 1.7"))
    return paths


XSS = [
    '<script>window.__pwned=1;alert("xss-script")</script>',
    '"><img src=x onerror="window.__pwned=1;alert(\'xss-img\')">',
    '" onerror="window.__pwned=1" x="',
    "' onmouseover='window.__pwned=1' '",
    "javascript:window.__pwned=1;alert('xss-url')",
    '<svg onload="window.__pwned=1"><a href="javascript:alert(1)">x</a></svg>',
    "</textarea></title></style><script>window.__pwned=1</script>",
    "{{ 7*7 }}{% raw %}",
]


def write_hostile(root) -> list[Any]:
    """Results whose every free-text field carries a payload; each must render as text."""
    from suite.results.record import write_result

    written = []
    for i, p in enumerate(XSS):
        r = site_result(
            f"cv/{p}" if i % 2 else WL, hardware=f"hw-{p}", backend=f"torch{p}" if i % 3 == 0 else "torch",
            seed=i, tta_s=10.0 + i, started_at=T0 + timedelta(minutes=i), sha=f"sha{p}", evals=3,
            description=f"description {p}", backend_version=p, error=f"error {p}", warnings=[f"warning {p}"],
            mllog=p, run_id=f"id{p}", software={p: p, "torch": p}, memory={p: p},
            throughput={"samples_per_s": 100.0 + i, p: 1.0},
        )
        r.hardware.hostname = p
        r.hardware.device_name = p
        r.hardware.cpu_model = p
        r.git.branch = p
        r.config["spec"]["model"]["arch"] = p
        r.config[p] = {p: [p]}
        r.config["spec"]["target"]["metric"] = p if i == 0 else "accuracy"
        if i == 0:
            for pt in r.eval_curve:
                pt.metrics[p] = pt.metrics["accuracy"]
        r.final_metrics = {p: 0.5}
        written.append(write_result(root, r))
    return written


def write_compare_report(folder, hardware_tps: dict[str, float] | None = None):
    """A real `trainbench compare --json-out` report: 5 baseline and 5 candidate seeds per hardware of
    cv/digits_cnn on torch; the candidate's time per step is `tps` against a 0.01 s baseline."""
    import json
    import random

    from benchmarks.sim.results import noisy_runs, write_all
    from suite.compare import tta as cmp

    rng = random.Random(7)
    tps = hardware_tps or {"nvidia-h200-x8": 0.012, "nvidia-a100-x8": 0.01, "cpu-amd-epyc-2c": 0.008}
    for i, (hw, t) in enumerate(sorted(tps.items())):
        write_all(folder / "base", noisy_runs(rng, 5, hardware=hw, first_seed=10 * i, cv_steps=0.01, cv_time=0.01))
        write_all(folder / "cand", noisy_runs(rng, 5, hardware=hw, first_seed=10 * i, time_per_step_s=t,
                                              cv_steps=0.01, cv_time=0.01))
    report = cmp.compare([folder / "base"], [folder / "cand"])
    path = folder / "compare.json"
    path.write_text(json.dumps(compare_output.to_json(report), indent=2))
    return path
