"""The torch backend's checkpoint state (suite/backends/resume.py saves it with torch.distributed.checkpoint) under
the whole model's parameter names, whatever the layout: a pipeline stage's `layers.0` is the whole model's
`layers.<first layer of the stage>`, so a checkpoint written at pp=2 loads at pp=2, at another split, or in one
process.

A pipeline rank's part is a view (`whole_view`): a module holding this rank's stage modules under the whole model's
names (the Llama's `layers`, the GPT's `blocks` as a ModuleDict keyed by the whole model's layer index), so
`get_state_dict` names every parameter and its optimizer state as the whole model does. The optimizer state is
flattened (torchtitan's `flatten_optimizer_state_dict=True`): one key per parameter and per param-group setting,
never a list of names that differs between ranks (DCP keeps one rank's copy of a key that every rank writes).

Not here: expert shards (ep > 1) and TP/FSDP inside stages, refused before the run starts
(`suite/backends/parallel/refusals.py` `checkpoint_refusal`).
"""

from __future__ import annotations

from typing import Any

from torch import nn


def whole_view(pipeline: Any) -> nn.Module:
    """This rank's stage modules under the whole model's names (the same parameter objects)."""
    view = nn.Module()
    if hasattr(pipeline, "stage_ids"):  # suite/backends/parallel/pipeline_llama.py: one or more stages a rank
        layers = nn.ModuleDict()
        for stage_index, module in zip(pipeline.stage_ids, pipeline.modules, strict=True):
            for j, layer in enumerate(module.layers):
                layers[str(pipeline.bounds[stage_index][j])] = layer
            for name in ("tok_embeddings", "norm", "output"):
                if getattr(module, name) is not None:
                    view.add_module(name, getattr(module, name))
        view.add_module("layers", layers)
        return view
    module = pipeline.module  # suite/backends/parallel/pipeline.py: the GPT, one stage a rank
    blocks = nn.ModuleDict({str(pipeline.layers[j]): block for j, block in enumerate(module.blocks)})
    for name in ("wte", "wpe", "ln_f", "lm_head"):
        if getattr(module, name) is not None:
            view.add_module(name, getattr(module, name))
    view.add_module("blocks", blocks)
    return view


def _options() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def state(model: nn.Module, optimizer: Any) -> dict[str, Any]:
    """The model's and optimizer's state for DCP, keyed by the whole model's names (`model`: the trained module, or
    a pipeline rank's `whole_view`)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if optimizer is None:
        return {"model": get_model_state_dict(model, options=_options())}
    model_sd, optim_sd = get_state_dict(model, optimizer, options=_options())
    return {"model": model_sd, "optim": optim_sd}


def load(model: nn.Module, optimizer: Any, app_state: dict[str, Any]) -> None:
    """Put what `state` gave (filled from a checkpoint) back into the model and optimizer."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    if optimizer is None:
        set_model_state_dict(model, app_state["model"], options=_options())
    else:
        set_state_dict(model, optimizer, model_state_dict=app_state["model"], optim_state_dict=app_state["optim"],
                       options=_options())
