"""What a run's MLLOG says in MLPerf's own terms: the benchmark name (a workload named after an MLPerf Training
benchmark, `nlp/llama31_8b`, logs `llama31_8b` as submission_benchmark, as the reference does) and the
hyper-parameter keys the benchmark rules read (mlperf-logging's compliance_checker/training_<ruleset>/
closed_<benchmark>.yaml: max_sequence_length, the AdamW constants, the warmup/decay schedule, max_steps, the
gradient clip, moe_aux_loss_coeff), each taken from the spec that ran. `check_benchmark` runs the official checker
over a log with the benchmark's own rules (the division file and the per-benchmark file it queues).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# MLPerf Training 6.1's closed-division benchmarks (mlperf-logging 4.1.68, training_6.1.0/closed_common.yaml's
# submission_benchmark CHECK; tests/measure/test_mlperf_llm_logs.py holds this list against that file)
MLPERF_BENCHMARKS = ("flux1", "llama31_8b", "llama2_70b_lora", "gpt_oss_20b", "deepseekv3_671b", "qwen35_397b_grpo",
                     "dlrmv4")
DECAYING = {"cosine": "cosine", "polynomial": "polynomial", "wsd": "warmup-stable-decay"}
TORCH_ADAMW = {"betas": (0.9, 0.999), "eps": 1e-8}  # torch.optim.AdamW's defaults, what runs when a spec is silent


def benchmark_name(workload: str) -> str:
    """MLPerf's name for a workload named after one of its benchmarks (`nlp/llama31_8b` -> `llama31_8b`), else
    the workload's own name (whose "/" keeps MLPerf's per-benchmark rules from applying to it)."""
    tail = workload.rsplit("/", 1)[-1]
    return tail if tail in MLPERF_BENCHMARKS else workload


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


def check_benchmark(path: Path, ruleset: str = "6.1.0") -> tuple[bool, list[str]]:
    """The official checker over a log, as `python -m mlperf_logging.compliance_checker --usage training --ruleset
    RULESET LOG` runs it: common.yaml, then the division file and the per-benchmark file it queues
    (closed_<submission_benchmark>.yaml). For a log whose benchmark is one of MLPERF_BENCHMARKS (any other name ends
    in a missing rules file). Returns (passed, the checker's messages, one per failed rule)."""
    from mlperf_logging.compliance_checker import mlp_compliance

    checker = mlp_compliance.make_checker("training", ruleset, quiet=True, werror=False)
    try:
        passed = checker.check_file(str(path), f"training_{ruleset}/common.yaml")
    finally:
        mlp_compliance.enqueued_configs.clear()
    return passed, [str(m) for m in (*checker.not_overwritable, *checker.overwritable.values())]
