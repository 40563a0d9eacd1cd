"""A spec's layout read as a statement about sharding, translated into each engine's own mechanism.

`parallel.fsdp=N` means: parameters, gradients and optimizer state sharded over N data-parallel ranks. Each engine
says that in its own words, and this module holds the translation (pure: no framework import, so the support
matrix, `trainbench plan` and the backends read the same one):

- torch, npu: FSDP2 (`fully_shard` over a mesh dimension of N): parameters, gradients and optimizer state sharded.
- torchtitan: its FSDP (data_parallel_shard_degree=N), the same.
- deepspeed: ZeRO stage 3 over the N ranks: parameters, gradients and optimizer state partitioned. Replicas of the
  sharded group (dp > 1 beside fsdp, HSDP) would be DeepSpeed's MiCS (`zero_optimization.mics_shard_size`), whose
  model must be built under `deepspeed.zero.MiCS_Init`: not wired here, so refused with that reason.
- megatron on CUDA: its distributed optimizer over the data-parallel ranks: optimizer state and fp32 main weights
  sharded, gradients reduce-scattered into the shard that updates them; the bf16 weights and the gradient buffer
  stay whole on every rank (ZeRO-1's memory, not FSDP's). Megatron-FSDP (`use_megatron_fsdp`) would shard all
  three, and is not wired.
- megatron on CPU: Megatron's optimizers hard-code CUDA (FACTS.md), so its nearest equivalent is torch's
  `ZeroRedundancyOptimizer` (ZeRO-1) over Megatron's data-parallel group: optimizer state sharded, each rank
  updating its shard and broadcasting it; gradients and weights whole on every rank (the CPU path keeps no fp32
  master copy). The same arithmetic as the unsharded optimizer, in the same order.

What changes numerics: ZeRO-3's gradient reduce-scatter (DeepSpeed) sums in another order than DDP's all-reduce
(tests/backends/test_translate_parity.py measures by how much); ZeRO-1's sharded update does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FsdpMapping:
    """How one engine holds `fsdp=N`: its mechanism and which of the three states it shards over the N ranks."""

    backend: str
    fsdp: int
    mechanism: str
    params_sharded: bool
    grads_sharded: bool
    optimizer_sharded: bool

    def describe(self) -> str:
        """One line for the result and `trainbench plan`, e.g. "fsdp=8 -> ZeRO-3 over 8 ranks"."""
        what = [n for n, s in (("parameters", self.params_sharded), ("gradients", self.grads_sharded),
                               ("optimizer state", self.optimizer_sharded)) if s]
        kept = [n for n, s in (("parameters", self.params_sharded), ("gradients", self.grads_sharded)) if not s]
        tail = f"; {' and '.join(kept)} whole on every rank" if kept else ""
        return f"fsdp={self.fsdp} -> {self.mechanism} over {self.fsdp} ranks ({', '.join(what)} sharded{tail})"


def fsdp_mapping(backend: str, fsdp: int, device_type: str = "cuda") -> FsdpMapping:
    """The mechanism `backend` holds `parallel.fsdp=fsdp` with, on a device of `device_type`: the engine's own
    `fsdp_mechanism(device_type)` -> (mechanism, parameters, gradients, optimizer state sharded), in its options module
    (suite/backends/<engine>/options.py)."""
    from suite import registry

    mechanism_of = registry.engine_attr(backend, "fsdp_mechanism")
    if mechanism_of is None:
        raise KeyError(f"no fsdp mapping for backend {backend!r}")
    mechanism, params, grads, optimizer = mechanism_of(device_type)
    return FsdpMapping(backend, fsdp, mechanism, params, grads, optimizer)


def deepspeed_refusal(par: Any, zero_stage: int, zero_stage_given: bool) -> str | None:
    """Why DeepSpeed cannot hold the spec's `parallel` block's sharding, or None (fsdp > 1 then means ZeRO-3)."""
    if par is None or par.fsdp == 1:
        return None
    if zero_stage_given and zero_stage != 3:
        return (f"parallel.fsdp={par.fsdp} means ZeRO-3 (parameters, gradients and optimizer state sharded) but "
                f"backends.deepspeed.zero_stage is {zero_stage}; drop zero_stage or set it to 3")
    if par.pp > 1:
        return (f"parallel.fsdp={par.fsdp} with pp={par.pp}: DeepSpeed's pipeline engine refuses ZeRO-3 "
                "(deepspeed/runtime/pipe/engine.py asserts 'ZeRO-2 and ZeRO-3 are incompatible with pipeline "
                "parallelism'); it would need pipeline stages with ZeRO-1 at most")
    if par.dp is not None and par.dp > 1:
        return hybrid_refusal(par.fsdp, par.dp)
    return None


def hybrid_refusal(fsdp: int, dp: int) -> str:
    return (f"parallel fsdp={fsdp} x dp={dp} (sharded groups, replicated): DeepSpeed's form of it is MiCS "
            f"(zero_optimization.mics_shard_size={fsdp}, the model built under deepspeed.zero.MiCS_Init), which this "
            "backend does not wire; use dp=1 (ZeRO-3 over every rank)")


def megatron_refusal(par: Any) -> str | None:
    """Why Megatron cannot hold the spec's fsdp, or None."""
    if par is None or par.fsdp == 1:
        return None
    if par.dp is not None and par.dp > 1:
        return (f"parallel fsdp={par.fsdp} x dp={par.dp}: Megatron's distributed optimizer shards over the whole "
                "data-parallel group (partial sharding is its num_distributed_optimizer_instances, not wired here); "
                f"use dp=1 (the optimizer sharded over all {par.fsdp} data-parallel ranks)")
    return None


def layout_record(mapping: FsdpMapping) -> dict[str, Any]:
    """The keys a result's parallel layout adds when fsdp > 1 is translated (none when fsdp == 1, so earlier
    results keep their comparison key)."""
    return {"fsdp": mapping.fsdp, "fsdp_mapping": mapping.describe()}


def megatron_mapping(fsdp: int, ep: int, device_type: str, pp: int = 1) -> FsdpMapping | None:
    """Megatron's mechanism for fsdp (None when fsdp == 1), or ValueError where the CPU stand-in cannot hold it."""
    if fsdp == 1:
        return None
    if pp > 1 and device_type != "cuda":
        # seen: char GPT, pp=2 x fsdp=2 on 4 gloo ranks moved 2e-3 from pp=2 x dp=2 within 6 steps, where pp=2 x dp=2
        # repeats itself bit for bit and fsdp=2 alone matches dp=2 bit for bit: not understood, so not offered
        raise ValueError(f"parallel fsdp={fsdp} with pp={pp} on CPU: the ZeroRedundancyOptimizer stand-in for "
                         "Megatron's distributed optimizer does not yet reproduce pp x dp's update under a pipeline "
                         "(issue 45); use dp, or run it on CUDA where Megatron's own distributed optimizer shards it")
    if ep > 1 and device_type != "cuda":
        raise ValueError(f"parallel fsdp={fsdp} with ep={ep} on CPU: ZeroRedundancyOptimizer (the CPU stand-in for "
                         "Megatron's distributed optimizer) would shard the experts, which differ per ep rank, over "
                         "the whole data-parallel group; on CUDA Megatron's own shards them over the expert "
                         "data-parallel group")
    return fsdp_mapping("megatron", fsdp, device_type)


def zero_redundancy(optimizer: Any, group: Any) -> Any:
    """The spec's optimizer with its state sharded over `group` (torch's ZeroRedundancyOptimizer: each rank steps
    its share of the parameters and broadcasts them): the same update, each rank holding 1/size of the state."""
    import inspect

    from torch.distributed.optim import ZeroRedundancyOptimizer

    cls = type(optimizer)
    accepted = inspect.signature(cls.__init__).parameters  # defaults also hold keys the class sets itself
    defaults = {k: v for k, v in optimizer.defaults.items() if k in accepted}
    groups = [dict(g) for g in optimizer.param_groups]
    return ZeroRedundancyOptimizer(groups, optimizer_class=cls, process_group=group, **defaults)
