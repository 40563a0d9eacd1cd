"""The hyper-parameter keys an MLPerf benchmark's rules read (mlperf-logging's compliance_checker/training_<ruleset>/
closed_<benchmark>.yaml: max_sequence_length, the AdamW constants, the warmup/decay schedule, max_steps, the
gradient clip, moe_aux_loss_coeff), each taken from the spec that ran. A spec names its benchmark in
`mlperf_benchmark` (suite/spec/schema.py's MLPERF_BENCHMARKS), which the MLLOG logs as submission_benchmark; a task's own keys
(LoRA's rank, GRPO's generations) come from its workload's `mllog_hyperparameters()`; `mllog.check_benchmark` runs
the official checker with the benchmark's own rules.
"""

from __future__ import annotations

from typing import Any

DECAYING = {"cosine": "cosine", "polynomial": "polynomial", "wsd": "warmup-stable-decay"}
TORCH_ADAMW = {"betas": (0.9, 0.999), "eps": 1e-8}  # torch.optim.AdamW's defaults, what runs when a spec is silent


def hyperparameters(spec: Any, workload: Any = None, grad_clip: float | None = None) -> dict[str, Any]:
    """The MLPerf hyper-parameter keys this spec determines (only those it does: a key the run has no value for
    is left out rather than guessed)."""
    out: dict[str, Any] = {}
    seq_len = getattr(workload, "seq_len", None)
    if seq_len:
        out["max_sequence_length"] = int(seq_len)
    opt, sched = spec.optimizer, spec.schedule
    extra = opt.params()
    if opt.name == "adamw":
        beta_1, beta_2 = extra.get("betas", TORCH_ADAMW["betas"])
        out.update(opt_adamw_beta_1=float(beta_1), opt_adamw_beta_2=float(beta_2),
                   opt_adamw_epsilon=float(extra.get("eps", TORCH_ADAMW["eps"])),
                   opt_adamw_weight_decay=float(opt.weight_decay))
    total = sched.total_steps or spec.budget.max_steps
    if total:
        out["max_steps"] = int(total)
    out["opt_learning_rate_warmup_steps"] = int(sched.warmup_steps)
    if sched.name in DECAYING and total:
        out["opt_end_learning_rate"] = float(opt.lr) * float(sched.min_lr_ratio)
        out["opt_learning_rate_decay_steps"] = int(total) - int(sched.warmup_steps)
        shape = DECAYING[sched.name]
        out["opt_learning_rate_decay_schedule"] = f"{shape} with linear warmup" if sched.warmup_steps else shape
    if grad_clip:
        out["opt_gradient_clip_norm"] = float(grad_clip)
    moe = getattr(getattr(workload, "model_cfg", None), "moe", None)
    if moe is not None:
        out["moe_aux_loss_coeff"] = float(moe.aux_loss_coeff)
    return out
