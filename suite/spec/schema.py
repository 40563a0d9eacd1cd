"""A workload spec's schema: the pydantic models of `workloads/<domain>/<name>.yaml`, SpecError, and the spec hash.

Validation is pure: loading a spec never touches data, devices or the environment.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Domain = Literal["cv", "nlp", "gnn", "rl", "rec"]
Tier = Literal["smoke", "standard", "full"]
# the precision recipes of suite/algorithms/precision.py, named here so that loading a spec imports no torch
PRECISIONS = ("fp32", "bf16", "fp16", "bf16_master", "float8")
Precision = Literal["fp32", "bf16", "fp16", "bf16_master", "float8"]
TIERS: tuple[Tier, ...] = ("smoke", "standard", "full")
MAX_SPEC_BYTES = 256 * 1024  # a spec is a page of YAML; anything larger is a mistake or an attack
MAX_SPEC_VALUES = 100_000  # after aliases are expanded: a few hundred bytes of `&a [*b, *b]` can mean billions
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")


# MLPerf Training 6.1's closed-division benchmarks (mlperf-logging 4.1.68, training_6.1.0/closed_common.yaml's
# submission_benchmark CHECK; tests/measure/test_mlperf_llm_logs.py holds this list against that file): the names a
# spec's `mlperf_benchmark` may give, which its MLLOG logs as submission_benchmark
MlperfBenchmark = Literal["flux1", "llama31_8b", "llama2_70b_lora", "gpt_oss_20b", "deepseekv3_671b",
                          "qwen35_397b_grpo", "dlrmv4"]
MLPERF_BENCHMARKS: tuple[str, ...] = get_args(MlperfBenchmark)

_NOT_HASHED = ("description", "tiers", "variants", "compare", "throughput", "mlperf_benchmark")


class SpecError(ValueError):
    """A spec (or an override of it) is invalid. `str()` is ready to show a user."""

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        lines = [f"{source}: {loc}: {msg}" if loc else f"{source}: {msg}" for loc, msg in problems]
        super().__init__("\n".join(lines))


class _Strict(BaseModel):
    # no NaN or infinity anywhere: `.inf` seconds is no budget, and a NaN compares false against every limit
    model_config = ConfigDict(extra="forbid", frozen=False, allow_inf_nan=False)


class _Open(BaseModel):
    """A block whose extra keys belong to a component (model arch, data set, optimizer) that validates them."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ModelSpec(_Open):
    arch: str = Field(description="model builder name in the registry, e.g. cnn, gpt, gcn, ppo_mlp")


class DataSpec(_Open):
    name: str = Field(description="data set name in the registry, e.g. digits, fashion_mnist")
    batch_size: int = Field(gt=0, description="global batch size (split evenly across data-parallel ranks)")
    eval_batch_size: int | None = Field(default=None, gt=0)
    micro_batch_size: int | None = Field(
        default=None, ge=1, description="samples per forward/backward on each data-parallel rank; "
        "batch_size / (data-parallel ranks x micro_batch_size) micro-batches are accumulated per optimizer step "
        "(and are the pipeline's micro-batches). Default: the whole local batch at once")

    @model_validator(mode="after")
    def _micro_divides(self) -> DataSpec:
        if self.micro_batch_size is not None and self.batch_size % self.micro_batch_size:
            raise ValueError(f"micro_batch_size {self.micro_batch_size} does not divide batch_size {self.batch_size}")
        return self


class OptimizerSpec(_Open):
    name: str = Field(default="adamw", description="built-in name or import path `pkg.module:Class`")
    lr: float = Field(gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    decay: Literal["matrices", "all"] = Field(
        default="matrices", description="which parameters weight_decay applies to: matrices = parameters of 2 or "
        "more dimensions that are not biases (no decay on 1-D parameters: norms, biases; Megatron's rule and "
        "most LLM recipes'); all = every parameter")


class ScheduleSpec(_Strict):
    name: str = Field(default="constant", description="constant | cosine | wsd | polynomial | import path")
    warmup_steps: int = Field(default=0, ge=0)
    total_steps: int | None = Field(default=None, gt=0, description="defaults to budget.max_steps")
    decay_fraction: float = Field(default=0.2, gt=0, le=1, description="wsd: share of steps spent decaying")
    min_lr_ratio: float = Field(default=0.0, ge=0, le=1)


class LossSpec(_Open):
    """`loss: label_smoothing` or `loss: {name: label_smoothing, smoothing: 0.1}`; extra keys go to the loss."""

    name: str = Field(description="built-in loss (cross_entropy, label_smoothing) or import path `pkg.mod:fn`")


class CompressionSpec(_Open):
    """`compression: {name: magnitude_prune, sparsity: 0.5}`; extra keys are validated by the method's Config."""

    name: str = Field(description="magnitude_prune | int8_qat | import path `pkg.module:Class`")


class ParallelSpec(_Strict):
    """How the processes of a run are laid out (`--parallel dp=2,fsdp=4,tp=2,pp=2,cp=1`). The product of the
    degrees must equal the process count; `dp` left out takes the rest. See suite/backends/layout.py."""

    dp: int | None = Field(default=None, ge=1, description="replicated data parallel (DDP); default: the rest")
    fsdp: int = Field(default=1, ge=1, description="sharded data parallel (FSDP2 / ZeRO-3 style)")
    tp: int = Field(default=1, ge=1, description="tensor parallel")
    pp: int = Field(default=1, ge=1, description="pipeline parallel (stages)")
    cp: int = Field(default=1, ge=1, description="context parallel (only 1 is implemented)")
    ep: int = Field(default=1, ge=1, description="expert parallel: MoE experts split over ep data-parallel ranks")
    schedule: Literal["gpipe", "1f1b", "interleaved"] = Field(
        default="1f1b", description="pipeline schedule when pp > 1 (interleaved: 2 stages per rank, the Llama only)")
    ac: Literal["none", "selective", "full"] = Field(default="none", description="activation checkpointing")
    sp: bool | None = Field(default=None, description="sequence parallelism of the norms and residual stream "
                            "over the tp group; default: on when tp > 1 (as torchtitan)")
    loss_parallel: bool | None = Field(default=None, description="vocab-parallel LM head and cross-entropy over "
                                       "the tp group (torchtitan's loss_parallel); default: on when tp > 1")
    tables: dict[str, str] | str | None = Field(
        default=None, description="recommenders: embedding tables sharded over the ranks beside data-parallel dense "
        "layers (suite/backends/parallel/tables.py): auto (the planner), one placement for every table, or "
        "{table: table_wise[:RANK] | row_wise | column_wise}; default: replicated")
    table_memory_gib: float | None = Field(default=None, gt=0, description="what one rank may hold of embedding "
                                           "tables under parallel.tables; a plan that puts more on a rank is refused")


class Target(_Strict):
    metric: str = Field(description="key of the dict that the workload's evaluate() returns")
    value: float = Field(gt=0)
    mode: Literal["max", "min"]
    provenance: str = Field(min_length=1, description="where the number comes from (paper, MLPerf rule, measurement)")

    def met(self, metrics: dict[str, float]) -> bool:
        if self.metric not in metrics:
            return False
        got = metrics[self.metric]
        return got >= self.value if self.mode == "max" else got <= self.value


class EvalSpec(_Strict):
    every_steps: int = Field(gt=0, description="evaluate after every N optimizer steps (on the clock)")
    at_start: bool = Field(default=False, description="also evaluate before the first step (on the clock)")
    subset: int | None = Field(default=None, gt=0, description="evaluate on the first N validation samples")
    first_step: int | None = Field(default=None, gt=0, description="no evaluation before this step (MLPerf dlrmv4 "
                                   "fixes its first one); then every every_steps, on the same grid")


MAX_BUDGET_S = 30 * 86400.0  # 1e308 s is as much "no limit" as .inf (refused): 30 days bounds every real run
DEFAULT_MAX_INIT_S = 600.0  # the init window of a spec outside the full tier when budget.max_init_s is unset
# MLPerf training rules: init_stop within 30 min of init_start (closed), 240 min (open); the checker's compile_time_mins
MLPERF_INIT_LIMIT_S = {"closed": 30 * 60.0, "open": 240 * 60.0}


class Budget(_Strict):
    max_train_s: float = Field(gt=0, le=MAX_BUDGET_S,
                               description="wall-clock limit of the timed run; past it the run ends as budget")
    max_steps: int | None = Field(default=None, gt=0)
    clock: Literal["auto", "own", "wall"] = Field(
        default="auto", description="what max_train_s counts: wall = wall time; own = wall time less the time the run "
        "waited for a CPU on a busy host (capped at 20x max_train_s of wall time; suite/measure/host_share.py); "
        "auto = own on a CPU device, wall on an accelerator. Time to target is wall time either way")
    max_init_s: float | None = Field(
        default=None, gt=0, le=MAX_BUDGET_S,
        description="limit of the untimed init (model, data, backend); past it the watchdog ends the run. Unset: "
        "MLPerf's init limit of the division the run declares (30 min closed, 240 min open) for a spec in the "
        "full tier, 600 s for any other")
    watchdog_s: float | None = Field(
        default=None, gt=0, le=MAX_BUDGET_S,
        description="a single step or eval taking longer than this ends the run as error"
    )


class CompareSpec(_Strict):
    noise_floor: float | None = Field(
        default=None, ge=0, lt=1, description="relative change below which compare never reports a regression"
    )


class FaultSpec(_Strict):
    """Injected faults (suite/execution/faults.py): a workload variant that declares them is a benchmark of its own (its spec
    hash differs), e.g. time to train with one node failure. Each fault fires on the first attempt of a job only."""

    kill_rank: int | None = Field(default=None, ge=0, description="SIGKILL this rank (as a failed node looks)")
    kill_at_step: int | None = Field(default=None, ge=1, description="... when it has finished this step")
    slow_rank: int | None = Field(default=None, ge=0, description="slow this rank: after each step it sleeps ...")
    slow_percent: float = Field(default=0.0, ge=0, le=10000, description="... this % of the step's own time")
    slow_at: Literal["after_step", "before_step"] = Field(
        default="after_step", description="... after its step (its peers wait at the stop agreement) or before it "
        "(they wait inside the step's gradient all-reduce)")
    stall_loader_s: float = Field(default=0.0, ge=0, description="the loader stalls this long before a batch")
    stall_at_step: int = Field(default=1, ge=1, description="the first batch it stalls before (1: the first)")
    stall_every: int = Field(default=0, ge=0, description="then every this many batches (0: once)")

    @model_validator(mode="after")
    def _pairs(self) -> FaultSpec:
        if (self.kill_rank is None) != (self.kill_at_step is None):
            raise ValueError("faults.kill_rank and faults.kill_at_step go together")
        if self.slow_percent and self.slow_rank is None:
            raise ValueError("faults.slow_percent needs faults.slow_rank")
        return self


class CheckpointSpec(_Strict):
    """Checkpointing as part of a recipe (`--checkpoint-every` overrides it); docs/metrics.md says which clock."""

    every_steps: int | None = Field(default=None, ge=1, description="save after every this many steps")
    every_s: float | None = Field(default=None, gt=0, description="or after this many seconds since the last save")
    asynchronous: bool = Field(default=True, description="torch.distributed.checkpoint.async_save where it works")

    @staticmethod
    def flag_overrides(text: str) -> dict[str, Any]:
        """`--checkpoint-every 50` (steps) or `--checkpoint-every 30s` (seconds) -> spec overrides; ValueError names
        the flag."""
        t = text.strip().lower()
        try:
            if t.endswith("s") and float(t[:-1]) > 0:
                return {"checkpoint.every_s": float(t[:-1])}
            if not t.endswith("s") and int(t) >= 1:
                return {"checkpoint.every_steps": int(t)}
        except ValueError:
            pass
        raise ValueError(f"--checkpoint-every {text!r}: expected a number of steps (50) or of seconds (30s), above 0")


class ThroughputSpec(_Strict):
    """`trainbench run --mode throughput`: untimed init, `warmup_steps` left out, then `measure_steps` timed one by one.
    Not in the spec hash (the comparison key carries both numbers, suite/results/key.py)."""

    warmup_steps: int = Field(default=20, ge=0, description="steps run before timing starts (caches, allocator, JIT)")
    measure_steps: int = Field(default=200, gt=0, description="steps whose every time is recorded")
    clock: Literal["wall", "cpu"] = Field(
        default="wall", description="wall: elapsed time (device events on accelerators); cpu: the process's CPU "
        "time per step, on a cpu device only (a shared runner's waits for a core left out; docs/compare.md)")


class WorkloadSpec(_Strict):
    name: str = Field(description="`<domain>/<name>`; must match the file's place under workloads/")
    domain: Domain
    version: int = Field(ge=1, description="bump when a change makes old results incomparable")
    description: str = ""
    task: str = Field(description="workload implementation in the registry, e.g. image_classification")
    model: ModelSpec
    data: DataSpec
    optimizer: OptimizerSpec
    schedule: ScheduleSpec = ScheduleSpec()
    loss: LossSpec | None = Field(default=None, description="loss override: built-in name or import path")
    compression: CompressionSpec | None = Field(default=None, description="pruning / QAT during training")
    precision: Precision | None = Field(
        default=None, description="the recipe the reference trains in (fp32 when unset); --precision wins")
    compile: bool | None = Field(
        default=None, description="torch.compile the model, as the reference does (eager when unset); "
        "--compile / --no-compile win")
    target: Target
    eval: EvalSpec
    budget: Budget
    tiers: set[Tier] = Field(min_length=1)
    backends: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per-backend options, e.g. {deepspeed: {zero_stage: 2}}"
    )
    variants: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="named override sets, e.g. tiny: {model.n_layer: 1}"
    )
    compare: CompareSpec = CompareSpec()
    parallel: ParallelSpec | None = Field(default=None, description="process layout; default: all data parallel")
    throughput: ThroughputSpec = ThroughputSpec()
    mlperf_benchmark: MlperfBenchmark | None = Field(default=None, description="the MLPerf benchmark it reproduces")
    grpo: dict[str, Any] | None = Field(default=None, description="task grpo's settings (suite/algorithms/grpo.py)")
    faults: FaultSpec | None = Field(default=None, description="injected faults: kill, slow a rank, stall the loader")
    checkpoint: CheckpointSpec | None = Field(default=None, description="checkpoints as part of the recipe")

    @field_validator("name")
    @classmethod
    def _name_is_safe(cls, v: str) -> str:
        parts = v.split("/")
        if len(parts) != 2 or not all(_NAME_RE.match(p) for p in parts):
            raise ValueError(
                "must be `<domain>/<name>` with lower-case letters, digits, '_' or '-' (no '..', no absolute paths)"
            )
        return v

    @field_validator("loss", mode="before")
    @classmethod
    def _loss_name(cls, v: Any) -> Any:
        return {"name": v} if isinstance(v, str) else v

    @field_validator("tiers", mode="before")
    @classmethod
    def _tiers_list(cls, v: Any) -> Any:
        if isinstance(v, list) and all(isinstance(t, str) for t in v):
            return set(v)
        return v  # anything else: pydantic names the problem (a TypeError here would escape as a crash)

    def init_limit(self, division: str) -> tuple[float, str]:
        """The longest the untimed init may take in a run that declares this MLPerf division, and where that
        figure comes from: `budget.max_init_s` when set, else MLPerf's limit for a full-tier spec (the watchdog
        and the recorded rule then agree), else DEFAULT_MAX_INIT_S (a hang guard for the small tiers)."""
        if self.budget.max_init_s is not None:
            return self.budget.max_init_s, f"budget.max_init_s={self.budget.max_init_s:g}"
        if "full" in self.tiers:
            limit = MLPERF_INIT_LIMIT_S.get(division, MLPERF_INIT_LIMIT_S["closed"])
            return limit, (f"MLPerf's init limit for the {division} division ({limit / 60:g} min; a full-tier spec "
                           f"without budget.max_init_s)")
        return DEFAULT_MAX_INIT_S, (f"default {DEFAULT_MAX_INIT_S:g} s (not a full-tier spec; set "
                                    f"budget.max_init_s to change it)")

    def canonical(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["tiers"] = sorted(data["tiers"])
        # fields added later are absent when unset, as before they existed: old spec hashes stay valid
        for key in ("compression", "parallel", "precision", "compile", "mlperf_benchmark", "grpo", "faults", "checkpoint"):
            if data.get(key) is None:
                data.pop(key, None)
        if data["data"].get("micro_batch_size") is None:
            data["data"].pop("micro_batch_size", None)
        return data

    def spec_hash(self) -> str:
        """Hash of what determines the run's numbers. Prose (description, the target's provenance), tier
        membership, the variants on offer and compare's noise floor are left out: editing them must not make
        every earlier result incomparable."""
        data = self.canonical()
        for key in _NOT_HASHED:
            data.pop(key, None)
        data["target"].pop("provenance", None)
        # the layout is how the run is spread over processes, not what it computes (recorded in result.parallel,
        # like the backend): the same training under another layout stays comparable
        data.pop("parallel", None)
        if not data["optimizer"].get("weight_decay"):
            data["optimizer"].pop("decay", None)  # which parameters decay changes nothing when nothing decays
        if data["eval"].get("first_step") is None:  # added later: unset, hashed as before it existed
            data["eval"].pop("first_step", None)
        if data["budget"].get("clock") == "auto":  # added later: the default, hashed as before it existed
            data["budget"].pop("clock", None)
        if data["budget"].get("max_init_s") is None:  # derived since (init_limit): hashed as the value it replaced,
            data["budget"]["max_init_s"] = DEFAULT_MAX_INIT_S  # so no spec hash moved when the default became derived
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
