"""Why rl/agentic_bugfix_grpo's GRPO does or does not lift its warm start: one instrumented run in this process.

For the warm start it prints pass@1 at the evaluation temperature and greedily, and how the held-out failures
fail (no edit, wrong line, wrong value, a malformed action, cut at max_turns); for each rollout the training reward,
the groups with mixed rewards, the advantages that are non-zero, the largest gap between the sampler's
log-probabilities and the recomputed old ones on the policy's tokens (temperature and masking: 0 when they agree),
whether every token the loss counts is an action token, the action tokens' entropy, and for each update the
gradient norm before clipping, the clipped fraction and the ratio's spread. A probe without the sandbox follows the
two decisions an episode turns on, teacher-forced on the expert's episodes of 256 tasks (the held-out ones first):
the mean probability of the right line number after `edit ` and of the right value after `=` (and the mean
log-probability of every other action token). `--sft-bound N` runs, from the same warm start, N supervised steps on
the expert's episodes of `data.batch_size` tasks at the same learning rate: what the exact label moves the probe,
an upper bound on what a rollout's reward (one bit per episode) can.

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/agentic_grpo_diagnose.py --rollouts 4 [--sft-bound 200] \
        [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import yaml

from suite.algorithms import grpo
from suite.models.common.generation import Sampling, token_logprobs
from suite.specload import load_spec
from suite.workloads.agentic.env import rollout
from suite.workloads.agentic.task import AgenticGRPO
from suite.workloads.contract import Context

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "workloads" / "rl" / "agentic_bugfix_grpo.yaml"


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"


def failure(task, traj) -> str:
    """How one episode went, from its actions."""
    if traj.reward > 0:
        return "solved"
    edits = [t.action for t in traj.turns if t.action.startswith("edit")]
    if any(t.reason == "bad_action" for t in traj.turns):
        return "malformed action"
    if not edits:
        return "no edit" if traj.end == "done" else f"no edit ({traj.end})"
    last = edits[-1].split(" ", 2)
    want = task.fix().split(" ", 2)
    if len(last) < 3:
        return "malformed edit"
    if last[1] != want[1]:
        return "wrong line"
    if last[2] != want[2]:
        name_ok = last[2].split("=")[0] == want[2].split("=")[0]
        return "wrong value" if name_ok else "wrong name"
    return f"right edit, not solved ({traj.end})"


def held_out(w: AgenticGRPO, model, sampling: Sampling, k: int) -> tuple[float, float, Counter]:
    tasks = w.repos.held_out
    gen = torch.Generator().manual_seed(0xE7A1)
    ro = rollout(model, w._envs(tasks, k), w.repos, sampling, gen, w.repos.cfg.max_turns, w.context,
                 w.repos.cfg.tool_workers)
    solved = ro.rewards.view(len(tasks), k)
    kinds = Counter(failure(tasks[i // k], tr) for i, tr in enumerate(ro.trajectories))
    return float((solved.max(1).values > 0).float().mean()), float(solved.mean()), kinds


class Probe:
    """Teacher-forced probabilities of the line number and the value of the expert's edit (no tool runs)."""

    def __init__(self, w: AgenticGRPO, n: int = 256):
        tasks = list(w.repos.held_out[:n]) + w.repos.draw(np.random.default_rng(99), max(0, n - len(w.repos.held_out)))
        rows = [w.repos.expert_ids(t) for t in tasks]
        self.ids = torch.tensor([r[0] for r in rows])
        self.actions = torch.tensor([r[1] for r in rows])[:, 1:].bool()
        text = [w.repos.decode(r[0]) for r in rows]
        # decode drops nothing here (no pad in an expert episode): character i is token i
        self.line = torch.tensor([t.index("edit ") + 5 for t in text])
        self.value = torch.tensor([t.index("=", i) + 1 for t, i in zip(text, self.line.tolist(), strict=True)])

    @torch.no_grad()
    def __call__(self, model) -> dict[str, float]:
        lp = model(self.ids[:, :-1]).float().log_softmax(-1).gather(-1, self.ids[:, 1:, None])[..., 0]
        rows = torch.arange(len(self.ids))
        other = self.actions.clone()
        other[rows, self.line - 1] = other[rows, self.value - 1] = False
        return {"p_line": float(lp[rows, self.line - 1].exp().mean()),
                "p_value": float(lp[rows, self.value - 1].exp().mean()), "other_logp": float(lp[other].mean())}


def fmt(probe: dict[str, float]) -> str:
    return f"p(line) {probe['p_line']:.3f} p(value) {probe['p_value']:.3f} other-token logp {probe['other_logp']:.4f}"


def sft_bound(w: AgenticGRPO, warm: dict, steps: int, lr: float, clip: float | None, probe: Probe) -> None:
    model = w.model_component.build(w.model_cfg, w.meta)
    model.load_state_dict(warm)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rng = np.random.default_rng([1, 2])
    for step in range(1, steps + 1):
        rows = [w.repos.expert_ids(t) for t in w.repos.draw(rng, w.spec.data.batch_size)]
        ids = torch.tensor([r[0] for r in rows])
        target = ids[:, 1:].masked_fill(torch.tensor([r[1] for r in rows])[:, 1:] == 0, -100)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if step % max(1, steps // 4) == 0 or step == steps:
            print(f"  supervised bound, step {step}: {fmt(probe(model))}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rollouts", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sft-bound", type=int, default=0, help="supervised steps of the label bound (0: none)")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    args = ap.parse_args()
    torch.set_num_threads(1)
    overrides = {k: yaml.safe_load(v) for k, _, v in (s.partition("=") for s in args.sets)}
    spec = load_spec(SPEC, overrides)
    w = AgenticGRPO(spec, Context(Path("/tmp"), args.seed, torch.device("cpu")))
    t0 = time.perf_counter()
    model = w.build_model()
    print(f"warm start: {time.perf_counter() - t0:.0f} s (load {load()})", flush=True)
    k = w.repos.cfg.pass_k
    model.eval()
    pk, p1, kinds = held_out(w, model, w.eval_sampling, k)
    print(f"held-out ({len(w.repos.held_out)} tasks) at T={w.eval_sampling.temperature}: pass@{k} {pk:.3f} "
          f"pass@1 {p1:.3f}; episodes: {dict(kinds)}", flush=True)
    probe = Probe(w)
    print(f"warm start probe: {fmt(probe(model))}", flush=True)
    clip = (spec.backends.get("torch") or {}).get("grad_clip")
    if args.sft_bound:
        sft_bound(w, {k: v.clone() for k, v in model.state_dict().items()}, args.sft_bound, spec.optimizer.lr, clip,
                  probe)
    greedy = w.eval_sampling.model_copy(update={"temperature": 0.0})
    _, g1, gkinds = held_out(w, model, greedy, 1)
    print(f"held-out greedy: pass@1 {g1:.3f}; episodes: {dict(gkinds)}", flush=True)
    w.attach(model)
    opt_spec = spec.optimizer.params()
    opt = torch.optim.AdamW(model.parameters(), lr=spec.optimizer.lr, weight_decay=opt_spec.get("weight_decay", 0.0))
    g = w.cfg.group_size
    for r in range(args.rollouts):
        model.eval()
        batch = w.make_batch(model, args.seed, r)
        rewards = batch["rewards"].view(-1, g)
        mixed = float(((rewards.max(1).values > rewards.min(1).values)).float().mean())
        adv = batch["advantages"]
        mask = batch["mask"].bool()
        # the sampler's log-probs of the same rollout (the model has not changed since it generated)
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + r)
        tasks_rng = np.random.default_rng([args.seed, r, 0xA6E7])
        tasks = w.repos.draw(tasks_rng, spec.data.batch_size * w.cfg.minibatches)
        ro = rollout(model, w._envs(tasks, g), w.repos, w.sampling, gen, w.repos.cfg.max_turns, w.context,
                     w.repos.cfg.tool_workers)
        same = torch.equal(ro.sequences, batch["sequences"])
        gap = float((ro.logprobs - batch["old_logp"]).abs()[mask].max()) if same else float("nan")
        # every counted token is an action token: decode the masked tokens per episode, compare to the actions
        p = batch["prompt_mask"].shape[1]
        body = batch["sequences"][:, p:]
        mask_ok = all(w.repos.decode(body[i][mask[i]].tolist()).replace("\n", "")
                      == "".join(t.action for t in tr.turns) for i, tr in enumerate(ro.trajectories)) if same else None
        with torch.no_grad():
            logits = model(batch["sequences"][:, :-1])[:, p - 1:].float() / w.sampling.temperature
            ent = -(logits.log_softmax(-1).exp() * logits.log_softmax(-1)).sum(-1)[mask].mean()
        kinds = Counter(failure(tasks[i // g], tr) for i, tr in enumerate(ro.trajectories))
        print(f"rollout {r}: reward {float(rewards.mean()):.3f}, mixed groups {mixed:.2f}, adv!=0 "
              f"{float((adv.abs() > 1e-6).float().mean()):.2f}, |sampler - recomputed logp| max {gap:.2e} "
              f"(same batch: {same}), mask = actions: {mask_ok}, action entropy {float(ent):.3f} nats, "
              f"tokens counted {int(mask.sum())}; {dict(kinds)}", flush=True)
        model.train()
        for e in range(w.cfg.ppo_epochs):
            logp = token_logprobs(model, batch["sequences"], p, w.sampling.temperature, batch["prompt_mask"])
            loss, parts = grpo.policy_loss(logp, batch["old_logp"], adv, batch["mask"], w.cfg)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip or float("inf")))
            opt.step()
            ratio = (logp.detach() - batch["old_logp"]).exp()[mask]
            print(f"  update {e}: loss {float(loss.detach()):+.4f} grad norm {norm:.3f} clip_frac {parts['clip_frac']:.3f} "
                  f"ratio [{float(ratio.min()):.3f}, {float(ratio.max()):.3f}]", flush=True)
        print(f"  after rollout {r}: {fmt(probe(model))}", flush=True)
    model.eval()
    pk, p1, kinds = held_out(w, model, w.eval_sampling, k)
    print(f"after {args.rollouts} rollouts: pass@{k} {pk:.3f} pass@1 {p1:.3f}; {dict(kinds)}; load {load()}")


if __name__ == "__main__":
    main()
