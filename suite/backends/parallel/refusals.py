"""The refusals of the parallel plans read from the spec alone (no torch, no process group, no model): what
`supports` of the torch and npu backends (suite/backends/torch/options.py) and `trainbench list --json` ask before
anything is built. The plans' own modules (`tables`, `pipeline_llama`, `expert`, `checkpoint`) re-export them.
"""

from __future__ import annotations

from typing import Any

PLACEMENTS = ("table_wise", "row_wise", "column_wise")


ARCHS = ("hstu", "dcnv2")  # the recommenders whose tables are `EmbeddingTables` (suite/models/recsys/tables.py)


def _entry_problem(field: str, entry: Any) -> str | None:
    if not isinstance(entry, str):
        return f"{field}: expected a placement string, got {entry!r}"
    kind, sep, rank = entry.partition(":")
    if kind not in PLACEMENTS or (sep and (kind != "table_wise" or not rank.isdigit())):
        return (f"{field}: unknown placement {entry!r} (expected table_wise, table_wise:RANK, row_wise or "
                "column_wise)")
    return None


def tables_refusal(spec: Any) -> str | None:
    """From the spec alone (no process group, no model): why `parallel.tables` cannot run (None when it can)."""
    par = spec.parallel
    if par is None or (par.tables is None and par.table_memory_gib is None):
        return None
    if par.tables is None:
        return "parallel.table_memory_gib: bounds the sharded embedding tables; set parallel.tables too"
    if spec.model.arch not in ARCHS:
        return (f"parallel.tables: shards a recommender's embedding tables (model.arch {' or '.join(ARCHS)}); "
                f"this spec's model.arch is {spec.model.arch!r}")
    others = [f"{d}={getattr(par, d)}" for d in ("fsdp", "tp", "pp", "cp", "ep") if getattr(par, d) > 1]
    if others or par.ac != "none":
        return (f"parallel.tables with {', '.join(others) or 'ac=' + par.ac} is not implemented: the dense layers "
                "beside sharded tables are data parallel (dp) only")
    if spec.checkpoint is not None:
        return "parallel.tables with checkpoint: saving sharded tables is not implemented; drop one of them"
    if isinstance(par.tables, str):
        if par.tables == "auto":
            return None
        return _entry_problem("parallel.tables", par.tables)
    problems = [_entry_problem(f"parallel.tables.{name}", e) for name, e in par.tables.items()]
    return next((p for p in problems if p), None)


STAGES_PER_RANK = {"gpipe": 1, "1f1b": 1, "interleaved": 2}


def pipeline_llama_refusal(spec: Any) -> str | None:
    """Pure: why `parallel.pp` cannot pipeline this Llama spec under the torch backend (None when it can)."""
    par = spec.parallel
    params = spec.model.params()
    from suite.models.llama import config as llama

    try:
        cfg = llama.Config.model_validate(params)
    except ValueError as e:
        return f"parallel.pp={par.pp}: the model block does not validate: {e}"
    stages = par.pp * STAGES_PER_RANK[par.schedule]
    if cfg.n_layer < stages:
        return (f"parallel.pp={par.pp} with schedule {par.schedule} is {stages} stages, more than model.n_layer="
                f"{cfg.n_layer}" + (" (interleaved holds 2 stages per rank)" if par.schedule == "interleaved" else ""))
    if par.tp > 1 or par.fsdp > 1 or par.cp > 1:
        return (f"parallel pp={par.pp} with tp/fsdp/cp on the Llama decoder is not implemented in the torch backend "
                "(the Llama pipeline composes with dp and ep)")
    if cfg.tie_embeddings:
        return "parallel.pp with model.tie_embeddings: the tied embedding across stages is wired for the GPT only"
    if par.ep > 1:
        return expert_refusal(spec)
    return None


def expert_refusal(spec: Any) -> str | None:
    """Pure: why the spec's model cannot be split `parallel.ep` ways (None when it can). Names the flag."""
    par = spec.parallel
    if par is None or par.ep == 1:
        return None
    flag = f"--parallel ep={par.ep}"
    from suite.models.llama import config as llama

    if not _is_llama_component(spec.model.arch):
        return f"{flag}: expert parallelism splits the experts of model.arch llama with `moe:`; this spec's " \
               f"model.arch is {spec.model.arch!r}"
    try:
        cfg = llama.Config.model_validate(spec.model.params())
    except ValueError as e:
        return f"{flag}: the model block does not validate: {e}"
    if cfg.moe is None:
        return f"{flag}: this model is dense (no `moe:` block): there are no experts to split; drop ep"
    if cfg.moe.experts % par.ep:
        return (f"{flag} does not divide model.moe.experts={cfg.moe.experts}: each ep rank holds an equal share of "
                f"the experts; choose an ep that divides {cfg.moe.experts}")
    if par.tp > 1 or par.cp > 1 or (par.pp > 1 and par.fsdp > 1):
        return f"{flag} with tp/pp/cp is not implemented in the torch backend, except pp with dp (ep composes " \
               "with dp and fsdp, and with pp, dp and ac)"
    if par.ac != "none" and par.pp == 1:
        return f"{flag} with ac={par.ac} is implemented under pp (each stage's layers checkpointed, " \
               "suite/backends/parallel/pipeline_llama.py), not with dp and fsdp alone"
    return None


LAYERED_ARCHS = ("llama", "hf_llama")


def _is_llama_component(arch: str) -> bool:
    """Whether `model.arch` is the suite Llama's component: by its registered name without importing anything; an
    import path (a plug-in) is imported and compared, as the registry would resolve it."""
    from suite import registry

    target = registry.MODELS.get(arch)
    if target is not None:
        return target == registry.MODELS["llama"]
    from suite.models.llama import model

    try:
        return registry.model_component(arch) is model.COMPONENT
    except registry.RegistryError:
        return False


def checkpoint_refusal(layout: Any, checkpointing: bool) -> str | None:
    """Pure: why this layout cannot checkpoint under the torch backend (None when it can)."""
    if not checkpointing or layout.pp <= 1:
        return None
    if layout.ep > 1 or layout.tp > 1 or layout.fsdp > 1:
        return (f"checkpoint with parallel pp={layout.pp} and ep/tp/fsdp > 1: the pipeline's checkpoint maps stage "
                "names back to the whole model's for pp and dp only (expert and DTensor shards inside a stage are "
                "not mapped); drop --checkpoint-every or use pp with dp")
    return None
