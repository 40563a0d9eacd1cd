"""One rank of each pipeline stage of a Llama-class spec's layout, per engine: parameters, gradients, optimizer
state, activations in flight, the step's peak, and the collectives of one optimizer step with their bytes.

The phases and the activation sums are the estimator's (suite/measure/llm_memory.py); what changes per engine is
how its mechanism holds `parallel.fsdp` (suite/backends/translate.py) and what precision it keeps each state in:
- torch / torchtitan (FSDP2): fp32 sharded weights, gradients and Adam slots (4 + 4 + 8 bytes a parameter, over the
  fsdp group); bf16 compute copies of one gathered layer. The torch backend accumulates micro-batches with FSDP2's
  no-sync (`set_requires_gradient_sync(False)`), which keeps a stage's unsharded gradients in the compute dtype
  across them; torchtitan reduce-scatters every micro-batch and holds none.
- deepspeed (ZeRO-3): the ZeRO paper's mixed-precision accounting (Rajbhandari et al. 2020, section 3.1): bf16
  weights and gradients (2 + 2), fp32 master weights and Adam slots (4 + 8), all over the fsdp group; the model is
  cast to bf16, so its residual stream is too.
- megatron (CUDA, distributed optimizer): Megatron's docs/source/api-guide/dist_optimizer.md table for bf16 weights
  with fp32 gradients: 2 + 4 bytes whole on every rank of a tensor/pipeline shard, 12 (fp32 main + Adam) over the
  data-parallel group; Megatron's bf16 model keeps a bf16 residual stream.
Pipeline: torchtitan's stage split (`generate_llm_fqn_per_model_part`: the embedding and the head weigh one layer
each, the remainder goes to the first stages; Megatron says the same with num_layers_in_first/last_pipeline_stage);
1F1B keeps pp - s micro-batches in flight on stage s, GPipe all of them. Collectives count the bytes one rank sends
(ring all-gather / reduce-scatter: (n - 1) / n of the full tensor; all-reduce twice that).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from suite.backends import layout as layouts
from suite.backends import translate
from suite.measure import llm_memory
from suite.measure.memory import OPTIMIZER_SLOTS, RECIPE_BYTES

ENGINES = ("torch", "torchtitan", "deepspeed", "megatron")
GIB = 2**30


class PlanError(ValueError):
    """The first thing of the layout that does not divide, fit, or that the engine cannot express; `plan` is the
    layout computed so far (a plan that does not fit still says what it would need)."""

    def __init__(self, message: str, plan: Plan | None = None):
        super().__init__(message)
        self.plan = plan


@dataclass
class Collective:
    name: str  # e.g. "all-gather (FSDP2, forward)"
    group: str  # "fsdp=8", "pp", ...
    per_step: int  # how many times in one optimizer step
    bytes_per_step: int  # bytes this rank sends over the step


@dataclass
class StagePlan:
    stage: int
    layers: tuple[int, int]  # [first, last) layer indices
    params: int  # parameters this rank holds (its shard)
    weights_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    gathered_bytes: int  # transient: one layer's gathered weights and gradients (FSDP / ZeRO-3)
    activations_bytes: int  # saved for backward by the micro-batches in flight
    in_flight: int
    recompute_bytes: int
    logits_bytes: int
    no_sync_grads_bytes: int  # FSDP2 no-sync: unsharded gradients across micro-batches
    peak_bytes: int
    phase: str
    collectives: list[Collective] = field(default_factory=list)


@dataclass
class Plan:
    workload: str
    backend: str
    world: int
    layout: str
    micro_batch: int
    micro_batches: int
    precision: str
    mapping: str
    method: str
    device_bytes: int
    stages: list[StagePlan]
    notes: list[str]
    run_refusal: str | None = None  # `trainbench run`'s own check of this backend (None: it runs)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def peak_bytes(self) -> int:
        return max(s.peak_bytes for s in self.stages)


def stage_split(n_layer: int, pp: int) -> list[tuple[int, int]]:
    """torchtitan's split: n_layer + 2 units (embedding, head) over pp stages, the remainder to the first ones."""
    if pp > n_layer:
        raise PlanError(f"parallel.pp={pp} is more stages than model.n_layer={n_layer}")
    units, extra = divmod(n_layer + 2, pp)
    out, start = [], 0
    for s in range(pp):
        n = units + (1 if s < extra else 0) - (s == 0) - (s == pp - 1)
        out.append((start, start + n))
        start += n
    if any(b <= a for a, b in out):
        raise PlanError(f"parallel.pp={pp}: a stage of model.n_layer={n_layer} would hold no layer")
    return out


def _bytes_per_param(engine: str, precision: str, slots: int) -> tuple[int, int, int]:
    """(weights, gradients, optimizer) bytes a parameter, before sharding."""
    w, a, _ = RECIPE_BYTES[precision]
    if engine == "deepspeed":
        return (a, a, (4 if a != 4 else 0) + 4 * slots)
    if engine == "megatron":
        return (a, 4, (4 if a != 4 else 0) + 4 * slots)  # grad_reduce_in_fp32
    return (w, w, 4 * slots)


def _ring(n: int, size: float) -> int:
    return int(size * (n - 1) / n) if n > 1 else 0


def check(spec: Any, backend: str, world: int) -> tuple[Any, layouts.Layout, int, int]:
    """(model config, layout, micro-batch, micro-batches) or PlanError naming the first thing that does not divide."""
    from suite.backends.layout import is_llama
    from suite.models.llama import config as llama_config

    if backend not in ENGINES:
        raise PlanError(f"--backend {backend}: plan lays out {', '.join(ENGINES)}")
    if not is_llama(spec.model.arch):
        raise PlanError(f"model.arch {spec.model.arch!r}: plan lays out the Llama-class decoder (arch llama) only")
    try:
        lay = layouts.resolve(spec.parallel, world)
        micro, n_micro = layouts.micro_batches(spec, lay)
    except layouts.LayoutError as e:
        raise PlanError(str(e)) from None
    par = spec.parallel
    if backend == "deepspeed":  # every refusal of DeepSpeed's is about the layout: its own words
        from suite import registry

        refusal = registry.backend_class("deepspeed").supports(spec)
        if refusal is None and lay.dp > 1 and lay.fsdp > 1:
            refusal = translate.hybrid_refusal(lay.fsdp, lay.dp)
    elif backend == "megatron":
        refusal = translate.megatron_refusal(par) or (translate.megatron_refusal(
            spec.parallel.model_copy(update={"dp": lay.dp})) if par is not None and lay.dp > 1 else None)
    else:
        refusal = None
    if refusal:
        raise PlanError(f"{backend}: {refusal}")
    cfg = llama_config.Config.model_validate(spec.model.params())
    stage_split(cfg.n_layer, lay.pp)
    for what, n in (("model.n_head", cfg.n_head), ("model.n_kv_head", cfg.kv_heads)):
        if n % lay.tp:
            raise PlanError(f"parallel.tp={lay.tp} does not divide {what}={n}")
    if cfg.moe is not None and cfg.moe.experts % lay.ep:
        raise PlanError(f"parallel.ep={lay.ep} does not divide model.moe.experts={cfg.moe.experts}")
    if cfg.moe is None and lay.ep > 1:
        raise PlanError(f"parallel.ep={lay.ep}: this model is dense")
    return cfg, lay, micro, n_micro


def vocab_of(spec: Any, cfg: Any) -> int:
    vocab = cfg.vocab_size or getattr(spec.data, "vocab_size", None) or spec.data.params().get("vocab_size")
    if not vocab:
        raise PlanError(f"{spec.name}: the vocabulary size is unknown (model.vocab_size / data.vocab_size)")
    return int(vocab)


def _local_counts(cfg: Any, vocab: int, lay: layouts.Layout, backend: str, world: int, precision: str,
                  meta: bool) -> tuple[dict[str, float], str]:
    """Parameters one rank holds of each module kind, and how that was found (the meta build or arithmetic)."""
    dense_full = llm_memory.layer_params(cfg, 0)
    moe_full = llm_memory.layer_params(cfg, cfg.n_layer - 1) if cfg.moe is not None else None
    head_full = cfg.d_model + (0 if cfg.tie_embeddings else vocab * cfg.d_model)
    # what is sharded over how many ranks: tensor parallelism splits the matmuls (norms stay whole: small), expert
    # parallelism the experts; then the engine's sharding (FSDP / ZeRO-3 over fsdp; Megatron keeps weights whole)
    shards = lay.fsdp if backend in ("torch", "torchtitan", "deepspeed") else 1
    expert_shards = lay.ep * shards  # split over ep, each ep rank's experts sharded over its fsdp group
    counts = {"dense_layer": sum(dense_full) / lay.tp / shards, "embedding": vocab * cfg.d_model / lay.tp / shards,
              "head": head_full / lay.tp / shards}
    if moe_full is not None:
        counts["moe_layer"] = moe_full[0] / lay.tp / shards + moe_full[1] / expert_shards
    method = "arithmetic from the layout (suite/measure/llm_memory.py's parameter counts)"
    if meta and backend == "torch" and lay.tp == 1 and lay.ep == 1 and lay.fsdp > 1:
        from suite.plan.meta import fsdp_local_params

        try:
            built = fsdp_local_params(cfg, vocab, world, lay.fsdp, precision)
        except RuntimeError as e:
            return counts, f"{method}; the meta build was skipped: {e}"
        for kind, n in built.items():  # padding aside, the build and the arithmetic must agree
            if abs(n - counts[kind]) > max(1.0, 1e-3 * counts[kind]):
                raise RuntimeError(f"plan: FSDP2's {kind} shard holds {n} parameters, the arithmetic {counts[kind]:.0f}")
        counts = {k: float(v) for k, v in built.items()}
        method = (f"built: FSDP2 fully_shard of each layer kind on meta tensors under a fake process group of {world} "
                  "ranks (torch.testing._internal.distributed.fake_pg.FakeStore)")
    return counts, method


def plan(spec: Any, backend: str, world: int, device_bytes: int, meta: bool = True) -> Plan:
    """The layout of `spec` at `world` ranks under `backend`, per stage; PlanError at the first that does not
    divide or fit."""
    cfg, lay, micro, n_micro = check(spec, backend, world)
    vocab = vocab_of(spec, cfg)
    precision = spec.precision or "fp32"
    if precision not in ("fp32", "bf16"):
        raise PlanError(f"precision {precision!r}: plan lays out fp32 and bf16")
    slots = OPTIMIZER_SLOTS.get(spec.optimizer.name, 2)
    _, a, r = RECIPE_BYTES[precision]
    if backend in ("deepspeed", "megatron"):
        r = a  # the model itself is cast to bf16 (DeepSpeed, Megatron's Float16Module): so is its residual stream
    bw, bg, bo = _bytes_per_param(backend, precision, slots)
    counts, method = _local_counts(cfg, vocab, lay, backend, world, precision, meta)
    opt_shards = lay.world // (lay.tp * lay.pp) if backend == "megatron" else 1  # distributed optimizer over dp
    tokens, d = micro * cfg.seq_len, cfg.d_model
    notes: list[str] = []
    stages = []
    for s, (first, last) in enumerate(stage_split(cfg.n_layer, lay.pp)):
        kinds = ["moe_layer" if cfg.is_moe(i) else "dense_layer" for i in range(first, last)]
        local = sum(counts[k] for k in kinds) + (counts["embedding"] if s == 0 else 0) \
            + (counts["head"] if s == lay.pp - 1 else 0)
        ends = ((vocab * d if s == 0 else 0) + (d + (0 if cfg.tie_embeddings else vocab * d)
                                                   if s == lay.pp - 1 else 0)) / lay.tp  # embedding, head
        full = sum(sum(llm_memory.layer_params(cfg, i)) for i in range(first, last)) / lay.tp + ends
        unsharded = sum(x + y / lay.ep for x, y in (llm_memory.layer_params(cfg, i) for i in range(first, last))) \
            / lay.tp + ends
        weights, grads = local * bw, local * bg
        if backend == "megatron":  # dense state over the data-parallel group, experts' over the expert-dp group
            experts = sum(llm_memory.layer_params(cfg, i)[1] for i in range(first, last)) / lay.ep / lay.tp
            optimizer = (local - experts) * bo / opt_shards + experts * bo / max(1, opt_shards // lay.ep)
        else:
            experts, optimizer = 0.0, local * bo
        gathered = 0
        if backend != "megatron" and lay.fsdp > 1:  # one layer's gathered compute copy and its full gradients
            gathered = int(max(x + y / lay.ep for x, y in (llm_memory.layer_params(cfg, i) for i in range(first, last)))
                           / lay.tp * (a + 4))  # FSDP gathers this rank's experts only
        per_layer = [llm_memory.per_token_layer_bytes(cfg, i, a) * tokens // lay.tp for i in range(first, last)]
        if lay.ac == "full":
            held, recompute = len(per_layer) * tokens * d * r, max(per_layer)
        else:
            held, recompute = sum(per_layer), 0
        in_flight = 1 if lay.pp == 1 else n_micro if lay.schedule == "gpipe" else min(lay.pp - s, n_micro)
        last_stage = s == lay.pp - 1
        head = tokens * (8 * d + 4 + d * (0 if a == 4 else a)) if last_stage else 0
        activations = in_flight * held + head
        logits = tokens * vocab // lay.tp * (a + 4 + (4 if a != 4 else 0)) if last_stage else 0
        # FSDP2's no-sync keeps the stage's unsharded gradients (in the fp32 reduce dtype) between micro-batches:
        # the torch backend's accumulation, and torch.distributed.pipelining's (torchtitan under pp)
        no_sync_engine = backend == "torch" or (backend == "torchtitan" and lay.pp > 1)
        no_sync = int(unsharded * 4) if no_sync_engine and lay.fsdp > 1 and n_micro > 1 else 0
        phases = {"forward": gathered + activations + logits,
                  "backward": gathered + activations + recompute + grads + no_sync,
                  "optimizer": grads + no_sync + local * 4 / opt_shards}
        phase = max(phases, key=lambda k: phases[k])
        peak = int(weights + optimizer + phases[phase])
        stages.append(StagePlan(
            stage=s, layers=(first, last), params=int(local), weights_bytes=int(weights), grads_bytes=int(grads),
            optimizer_bytes=int(optimizer), gathered_bytes=gathered, activations_bytes=int(activations),
            in_flight=in_flight, recompute_bytes=int(recompute), logits_bytes=int(logits),
            no_sync_grads_bytes=no_sync, peak_bytes=peak, phase=phase,
            collectives=_collectives(cfg, backend, lay, n_micro, tokens, a, s, full, local - experts, first, last)))
    if any(st.no_sync_grads_bytes for st in stages):
        notes.append("FSDP2's no-sync (the torch backend's micro-batches; torch.distributed.pipelining's under pp) keeps "
                     "each stage's unsharded gradients, in the fp32 reduce dtype, until the last micro-batch's "
                     "reduce-scatter: what `no-sync grads` counts (suite/measure/llm_memory.py does not)")
    mapping = _mapping(backend, lay)
    from suite import registry

    result = Plan(workload=spec.name, backend=backend, world=world, layout=lay.describe() + f",ac={lay.ac}",
                  micro_batch=micro, micro_batches=n_micro, precision=precision, mapping=mapping, method=method,
                  device_bytes=device_bytes, stages=stages, notes=notes,
                  run_refusal=registry.backend_class(backend).supports(spec))
    worst = max(stages, key=lambda st: st.peak_bytes)
    if worst.peak_bytes > device_bytes:
        raise PlanError(f"{backend}: stage {worst.stage} (layers {worst.layers[0]}-{worst.layers[1] - 1}) needs "
                        f"{worst.peak_bytes / 1e9:.1f} GB per rank at its {worst.phase} peak, more than the "
                        f"{device_bytes / 1e9:.0f} GB of the device (--device-memory-gb)", result)
    return result


def _collectives(cfg: Any, backend: str, lay: layouts.Layout, n_micro: int, tokens: int, a: int, s: int,
                 full: float, local: float, first: int, last: int) -> list[Collective]:
    """The collectives one rank of stage s takes part in over one optimizer step, with the bytes it sends."""
    out: list[Collective] = []
    f = lay.fsdp
    if backend in ("torch", "torchtitan") and f > 1:
        gathers = 1 if lay.pp > 1 else 2  # under pp the stage stays gathered through backward (reshard off)
        out.append(Collective("all-gather of the stage's weights (FSDP2, compute dtype)", f"fsdp={f}",
                              gathers * n_micro, gathers * n_micro * _ring(f, full * a)))
        scatters = 1 if backend == "torch" else n_micro  # torch: no-sync until the last micro-batch
        out.append(Collective("reduce-scatter of the gradients (fp32)", f"fsdp={f}", scatters,
                              scatters * _ring(f, full * 4)))
    elif backend == "deepspeed" and f > 1:
        out.append(Collective("all-gather of each layer's weights (ZeRO-3, forward and backward)", f"fsdp={f}",
                              2 * n_micro, 2 * n_micro * _ring(f, full * a)))
        out.append(Collective("reduce-scatter of the gradients (ZeRO-3, every micro-batch)", f"fsdp={f}", n_micro,
                              n_micro * _ring(f, full * a)))
    elif backend == "megatron":
        dp = lay.world // (lay.tp * lay.pp)
        if dp > 1:
            # the dense gradients (the experts' reduce over the expert-data-parallel group, dp / ep ranks)
            out.append(Collective("reduce-scatter of the gradient buffer (fp32, distributed optimizer)", f"dp={dp}",
                                  1, _ring(dp, local * 4)))
            out.append(Collective("all-gather of the updated weights (distributed optimizer)", f"dp={dp}", 1,
                                  _ring(dp, local * a)))
    if lay.dp > 1 and backend in ("torch", "torchtitan"):
        out.append(Collective("all-reduce of the gradients over the replicas (HSDP)", f"dp={lay.dp}", 1,
                              2 * _ring(lay.dp, local * 4)))
    if lay.pp > 1:
        boundary = tokens * cfg.d_model * a
        sends = (s < lay.pp - 1) + (s > 0)  # activations forward, their gradients backward
        out.append(Collective("send/recv of activations and their gradients (pipeline)", f"pp={lay.pp}",
                              sends * n_micro, sends * n_micro * boundary))
    if lay.tp > 1:
        per_layer = 4 + (2 if lay.ac == "full" else 0)  # 2 forward, 2 backward (+ the recomputed forward)
        n = per_layer * (last - first) * n_micro
        out.append(Collective("all-reduce of the row-parallel outputs (tensor parallel)", f"tp={lay.tp}", n,
                              n * 2 * _ring(lay.tp, tokens * cfg.d_model * a)))
    if lay.ep > 1 and cfg.moe is not None:
        moe_layers = sum(cfg.is_moe(i) for i in range(first, last))
        # dispatch and combine, forward and backward (+ the recomputed forward's: full AC re-runs the exchange)
        n = (4 + (2 if lay.ac == "full" else 0)) * moe_layers * n_micro
        out.append(Collective("all-to-all of routed tokens (expert parallel)", f"ep={lay.ep}", n,
                              n * _ring(lay.ep, tokens * cfg.moe.top_k * cfg.d_model * a)))
    return out


def _mapping(backend: str, lay: layouts.Layout) -> str:
    """The layout in the engine's words (suite/backends/translate.py for fsdp)."""
    parts = [translate.fsdp_mapping(backend, lay.fsdp).describe()] if lay.fsdp > 1 else []
    dp_all = lay.world // (lay.tp * lay.pp)
    if backend == "megatron" and lay.fsdp == 1 and dp_all > 1:
        parts.append(f"Megatron's distributed optimizer over the {dp_all} data-parallel ranks (its default)")
    if lay.ep > 1:
        parts.append(f"ep={lay.ep} -> experts split over {lay.ep} ranks"
                     + (" (Megatron's expert_model_parallel_size)" if backend == "megatron" else
                        ", dense weights replicated over them" if lay.fsdp == 1 else ""))
    if lay.pp > 1:
        parts.append(f"pp={lay.pp} -> {lay.schedule} over {lay.pp} stages"
                     + (" (num_layers_in_first/last_pipeline_stage)" if backend == "megatron" else ""))
    return "; ".join(parts) or "data parallel only (nothing sharded)"
