"""The time of a GRPO step split by phase, veRL's names (`timing_s/gen`, `old_log_prob`, `ref`, `update_actor`)
plus the reward and the weight sync, with tokens per second and the MFU of generation and of the update.

FLOPs (Kaplan et al. 2020; PaLM's attention term): generation is forward only, 2 x the active matmul parameters
per position computed (the prompt's prefill rows and one row per generated token) plus 4 x layers x query heads x
head_dim per attended position (score and value products over the KV cache); the update is 6 x N per trained
token (forward and backward, recomputation excluded), as the issue and veRL's `perf/mfu/actor` count it.
The update is timed by the batch iterator, from handing a batch to the harness to being asked for the next, less
any evaluation between: the run's last update (the iterator is not asked again) is left out of its seconds,
tokens and FLOPs alike, so the rates and per-step figures cover the same updates.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

PHASES = ("weight_sync", "gen", "reward", "old_log_prob", "ref", "update")
ROLLOUT_PHASES = ("gen",)  # what compare calls a rollout regression
TRAINING_PHASES = ("old_log_prob", "ref", "update")  # ... and a training one (training_s_per_step)


class PhaseClock:
    def __init__(self, minibatches: int = 1) -> None:
        self.minibatches = minibatches
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.tokens_generated = 0
        self.tokens_trained = 0
        self.gen_flops = 0.0
        self.update_flops = 0.0
        self.rollouts = 0
        self.updates = 0

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t

    def report(self, peak_flops_per_s: float | None, dtype: str) -> dict[str, Any]:
        """What the Result records as `phases`."""
        s = self.seconds
        # per optimizer step: a rollout's phases over the updates it feeds, the update over the updates completed
        per_rollout = max(self.rollouts * self.minibatches, 1)
        per_update = max(self.updates, 1)
        out: dict[str, Any] = {
            "seconds": dict(s),
            "rollout_s_per_step": sum(s[p] for p in ROLLOUT_PHASES) / per_rollout,
            "training_s_per_step": (s["old_log_prob"] + s["ref"]) / per_rollout + s["update"] / per_update,
            "weight_sync_s_per_step": s["weight_sync"] / per_rollout,
            "rollouts": self.rollouts,
            "updates": self.updates,
            "tokens_generated": self.tokens_generated,
            "tokens_trained": self.tokens_trained,
            "gen_tokens_per_s": self.tokens_generated / s["gen"] if s["gen"] else None,
            "trained_tokens_per_s": self.tokens_trained / s["update"] if s["update"] else None,
            "gen_flops": self.gen_flops,
            "update_flops": self.update_flops,
            "dtype": dtype,
            "peak_flops_per_s": peak_flops_per_s,
        }
        for name, flops, secs in (("gen", self.gen_flops, s["gen"]), ("update", self.update_flops, s["update"])):
            out[f"mfu_{name}"] = flops / secs / peak_flops_per_s if secs and peak_flops_per_s else None
        return out
