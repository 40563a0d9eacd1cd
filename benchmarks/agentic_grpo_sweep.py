"""A sweep of rl/agentic_bugfix_grpo's GRPO settings (update epochs per rollout, minibatches, group size, learning
rate, tasks per rollout): each setting x seed trains from the same warm start for a fixed number of rollouts, in
this process (the task's own rollouts, loss and evaluation; AdamW and the spec's gradient clip as the torch backend
applies them), and prints pass@k at each evaluation, the best, the seconds and the machine's load.

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/agentic_grpo_sweep.py --rollouts 30 --seeds 1 \
        --grid grpo.ppo_epochs=1,4 --grid optimizer.lr=3e-4,1e-3 [--set data.batch_size=8] [--json out.jsonl]

The figures that set the spec's target come from `trainbench run` (benchmarks/agentic_grpo_seeds.py); this only
chooses what to run there.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import torch
import yaml

from suite.algorithms import grpo
from suite.specload import load_spec
from suite.workloads.agentic.task import AgenticGRPO
from suite.workloads.contract import Context

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "workloads" / "rl" / "agentic_bugfix_grpo.yaml"


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"


def parse(pairs: list[str]) -> dict:
    out = {}
    for p in pairs:
        key, _, value = p.partition("=")
        out[key] = yaml.safe_load(value)
    return out


_WARM: dict[str, dict[str, torch.Tensor]] = {}


def train(overrides: dict, seed: int, rollouts: int, every: int, shuffle: bool = False) -> dict:
    spec = load_spec(SPEC, overrides)
    w = AgenticGRPO(spec, Context(Path("/tmp"), seed, torch.device("cpu")))
    key = json.dumps(w.cfg.warm_start.model_dump(), sort_keys=True)
    if key not in _WARM:  # the warm start depends on warm_start alone: one per sweep
        _WARM[key] = {k: v.clone() for k, v in w.build_model().state_dict().items()}
    model = w.model_component.build(w.model_cfg, w.meta)
    model.load_state_dict(_WARM[key])
    w.attach(model)
    rewards: list[float] = []  # each rollout's mean reward (the training episodes' pass rate)
    make_batch = w.make_batch

    def counted(net, seed_, step):
        batch = make_batch(net, seed_, step)
        rewards.append(float(batch["rewards"].float().mean()))
        if shuffle:  # the negative control: the rollout's rewards permuted across its episodes, signal gone
            perm = torch.randperm(batch["rewards"].numel(), generator=torch.Generator().manual_seed(seed_ * 7919 + step))
            batch["advantages"] = grpo.group_advantages(batch["rewards"][perm], w.cfg.group_size, w.cfg.normalize_std)
        return batch

    w.make_batch = counted  # type: ignore[method-assign]
    opt_spec = spec.optimizer.params()
    opt = torch.optim.AdamW(model.parameters(), lr=spec.optimizer.lr, weight_decay=opt_spec.get("weight_decay", 0.0),
                            betas=opt_spec.get("betas", (0.9, 0.999)))
    clip = (spec.backends.get("torch") or {}).get("grad_clip")
    per_rollout = w.cfg.ppo_epochs * w.cfg.minibatches
    t0, curve = time.perf_counter(), []
    model.eval()
    curve.append((0, w.evaluate(model)["pass_at_k"], 0.0))
    it = w.train_batches(0, 1)
    for r in range(1, rollouts + 1):
        model.train()
        for _ in range(per_rollout):
            batch = next(it)
            opt.zero_grad(set_to_none=True)
            w.loss(model, batch).backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
        if r % every == 0 or r == rollouts:
            model.eval()
            curve.append((r, w.evaluate(model)["pass_at_k"], time.perf_counter() - t0))
    it.close()
    return {"curve": curve, "train_reward": rewards, "best": max(p for _, p, _ in curve[1:]), "start": curve[0][1],
            "last": curve[-1][1], "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rollouts", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--every", type=int, default=5, help="rollouts between evaluations")
    ap.add_argument("--grid", action="append", default=[], help="KEY=V1,V2,...: one axis of the sweep")
    ap.add_argument("--set", action="append", default=[], dest="fixed", help="KEY=VALUE for every setting")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--shuffle-rewards", action="store_true", help="negative control: permute each rollout's rewards")
    args = ap.parse_args()
    torch.set_num_threads(1)
    axes = [(k, [yaml.safe_load(v) for v in vs.split(",")]) for k, _, vs in (g.partition("=") for g in args.grid)]
    fixed = parse(args.fixed)
    print("| setting | seed | pass@k start | best | last | curve (rollout:pass@k) | s | load before/after |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    for values in itertools.product(*[vs for _, vs in axes]):
        setting = {**fixed, **dict(zip([k for k, _ in axes], values, strict=True))}
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            before = load()
            row = train(setting, seed, args.rollouts, args.every, args.shuffle_rewards)
            name = " ".join(f"{k.split('.')[-1]}={v}" for k, v in setting.items()) or "spec"
            name += " (rewards shuffled)" if args.shuffle_rewards else ""
            curve = " ".join(f"{r}:{p:.2f}" for r, p, _ in row["curve"])
            tr = row["train_reward"]
            curve += f" (train reward {sum(tr[:5]) / 5:.2f} -> {sum(tr[-5:]) / 5:.2f})"
            print(f"| {name} | {seed} | {row['start']:.3f} | {row['best']:.3f} | {row['last']:.3f} | {curve} | "
                  f"{row['seconds']:.0f} | {before}/{load()} |", flush=True)
            if args.json:
                with args.json.open("a") as f:
                    f.write(json.dumps({"setting": setting, "seed": seed, **row}) + "\n")


if __name__ == "__main__":
    main()
