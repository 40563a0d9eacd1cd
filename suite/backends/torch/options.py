"""What the torch backend accepts: the spec's `backends.torch` block (`Options`) and `supports` (the reason a spec's
layout cannot run here, or None; it reads the spec only and builds nothing)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from suite.backends import layout as layouts
from suite.backends.availability import Availability
from suite.backends.parallel import refusals  # not the plans' modules: they import torch
from suite.measure.fingerprint import package_version


class Options(BaseModel):
    """The spec's `backends.torch` block."""

    model_config = ConfigDict(extra="forbid")
    find_unused_parameters: bool = False
    grad_clip: float | None = None


def supports(spec: Any) -> str | None:
    """Pure (no framework import): the layouts whose plans exist for this spec's model. DDP and FSDP2 wrap any
    model; tensor and pipeline plans are written for the suite GPT's blocks, activation checkpointing for the GPT's
    blocks and the Llama-class decoder's layers (dense or MoE, pretrained or with LoRA adapters)."""
    par = spec.parallel
    if par is not None and (why := refusals.checkpoint_refusal(par, spec.checkpoint is not None)):
        return why
    if par is not None and (par.tables is not None or par.table_memory_gib is not None):
        return refusals.tables_refusal(spec)  # recommenders' sharded tables: dp only beside them
    if par is not None and par.pp > 1 and layouts.is_llama(spec.model.arch):  # dense or MoE, with dp and ep
        return refusals.pipeline_llama_refusal(spec)
    if par is not None and par.ep > 1:
        return refusals.expert_refusal(spec)
    if par is None or (par.tp == 1 and par.pp == 1 and par.ac == "none"):
        return None
    if par.tp == 1 and par.pp == 1 and spec.model.arch in refusals.LAYERED_ARCHS:
        return None
    if spec.model.arch == "flux" and par.pp == 1 and par.ac == "none":  # the DiT's own TP plan (models/flux.py)
        asked = [k for k in ("sp", "loss_parallel") if getattr(par, k)]
        return f"parallel.{asked[0]}: the DiT's tensor-parallel plan has none; set it false" if asked else None
    if not layouts.is_gpt(spec.model.arch):
        ac = par.ac != "none" and spec.model.arch not in refusals.LAYERED_ARCHS
        wanted = ", ".join(f for f, on in (("tp", par.tp > 1), ("pp", par.pp > 1), ("ac", ac)) if on)
        return (f"parallel {wanted}: the torch backend's tensor/pipeline/checkpointing plans are for the suite GPT "
                f"(model.arch gpt); this spec's model.arch is {spec.model.arch!r}")
    params = spec.model.params()
    if par.tp > 1 and int(params.get("n_head", 1)) % par.tp:
        return f"parallel.tp={par.tp} does not divide model.n_head={params.get('n_head')}"
    if par.pp > 1 and par.schedule == "interleaved":
        return "parallel.schedule interleaved is wired for the Llama decoder (model.arch llama), not the GPT"
    if par.pp > 1 and int(params.get("n_layer", 1)) < par.pp:
        return f"parallel.pp={par.pp} is more stages than model.n_layer={params.get('n_layer')}"
    return None


def available_installed(device_type: str) -> Availability:
    """torch's availability from its installed files (its class reports torch.__version__, the same string)."""
    from suite.measure.fingerprint import torch_build

    version = package_version("torch") or torch_build("__version__")
    if version is None:
        return Availability(False, "torch is not installed (pip install torch)")
    return Availability(True, version=version)


def fsdp_mechanism(device_type: str) -> tuple[str, bool, bool, bool]:
    """What holds `parallel.fsdp` (suite/backends/translate.py): mechanism, parameters, gradients, optimizer sharded."""
    return ("FSDP2", True, True, True)


# the model archs whose parameters are mostly embedding tables (suite/models/recsys/): what TorchRec would shard
TABLE_ARCHS = ("hstu", "dcnv2")
TORCHREC = ("embedding tables shard on torch's own collectives (parallel.tables, suite/backends/parallel/tables.py: "
            "table-, row- and column-wise, TorchRec's placements), not through TorchRec: torchrec 1.9.2 with "
            "fbgemm-gpu-cpu 1.9.0 installs beside torch 2.13.0 without changing it, but does not load "
            "(fbgemm_gpu_tbe_index_select.so: undefined symbol torch::autograd::_wrap_outputs, built against another "
            "torch; docs/recommenders.md, \"TorchRec here\")")


def note(spec: Any) -> str | None:
    """What `list --matrix --why` adds to a supported cell: how this backend holds what the reference runs on
    another library (the recommenders' tables: TorchRec)."""
    return TORCHREC if str(spec.model.arch) in TABLE_ARCHS else None
