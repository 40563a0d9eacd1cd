"""Name -> implementation, imported lazily: a CPU user never imports megatron, a CV user never imports gymnasium.

Entries are `module:attribute` strings. A model or data set component is a module-level object with a
pydantic `Config` (extra="forbid") that validates the spec block's extra fields, and a builder. Spec validation reads
a registered component's Config (a task's checks) from the torch-free module TASK_CHECKS / MODEL_CONFIGS /
DATASET_CONFIGS name, so `trainbench spec validate` imports no torch.
Users plug in their own code with an import path in place of a name (`mypkg.models:Builder`).

May import: `suite.spec`, `suite.strict_numbers`, `suite.backends.base` (the backend class it hands out is checked
against the contract). Every implementation is named by a string and imported when asked for, never here.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

# pydantic and suite.spec are imported where a block is validated: the names below (BACKENDS feeds `run --help`)
# are read by commands that must answer at once

if TYPE_CHECKING:
    from pydantic import BaseModel

    from suite.backends.base import Backend

# task (the Python behind a spec) -> class implementing suite.workloads.base.Workload
TASKS: dict[str, str] = {
    "image_classification": "suite.workloads.image_classification:ImageClassification",
    "image_folder_classification": "suite.workloads.image_folder:ImageFolderClassification",
    "language_model": "suite.workloads.language_model:LanguageModel",
    "causal_lm_samples": "suite.workloads.sample_lm:CausalLMSamples",   # fixed-length samples with labels (LoRA)
    "node_classification": "suite.workloads.node_classification:NodeClassification",
    "graph_classification": "suite.workloads.graph_classification:GraphClassification",
    "ppo": "suite.workloads.ppo:PPO",
    "grpo": "suite.workloads.grpo:GRPO",   # RL post-training of a causal LM on verifiable problems
    "agentic_grpo": "suite.workloads.agentic.task:AgenticGRPO",   # multi-turn tool use in a sandbox, async GRPO
    "diffusion": "suite.workloads.diffusion:Diffusion",   # rectified-flow DiT (MLPerf flux1)
    "sequential_recommendation": "suite.workloads.recsys:SequentialRecommendation",   # HSTU, temporal windows (dlrmv4)
    "streaming_recommendation": "suite.workloads.recsys:StreamingRecommendation",   # MLPerf dlrmv4 on Yambda
    "click_through": "suite.workloads.recsys:ClickThrough",   # DLRM-DCNv2 click-through, temporal windows
    "criteo_click_through": "suite.workloads.recsys:CriteoClickThrough",   # MLPerf dlrm_dcnv2 on Criteo 1TB
}

# model arch -> component with .Config and .build(cfg, ctx)
MODELS: dict[str, str] = {
    "cnn": "suite.models.vision.cnn:COMPONENT",
    "gpt": "suite.models.gpt.model:COMPONENT",
    "llama": "suite.models.llama.model:COMPONENT",   # dense Llama 3 and MoE (gpt-oss, DeepSeek-V3 shapes) presets
    "hf_llama": "suite.models.hf.pretrained:COMPONENT",   # the same from a Hugging Face checkpoint, optionally LoRA
    "resnet": "suite.models.vision.resnet:COMPONENT",
    "airbench": "suite.models.vision.airbench:COMPONENT",
    "gcn": "suite.models.graph.gcn:COMPONENT",
    "gin": "suite.models.graph.gin:COMPONENT",
    "ppo_mlp": "suite.models.rl.ppo_mlp:COMPONENT",
    "flux": "suite.models.flux.model:COMPONENT",   # Flux-style diffusion transformer (double + single stream blocks)
    "hstu": "suite.models.recsys.hstu:COMPONENT",     # MLPerf dlrmv4's HSTU encoder over embedding tables
    "dcnv2": "suite.models.recsys.dcnv2:COMPONENT",   # DLRM with low-rank DCN-v2 cross layers (MLPerf dlrm_dcnv2)
}

# data set name -> component with .Config and .load(cfg, ctx)
DATASETS: dict[str, str] = {
    "digits": "suite.data.vision.digits:COMPONENT",
    "fashion_mnist": "suite.data.vision.fashion_mnist:COMPONENT",
    "cifar10": "suite.data.vision.cifar10:COMPONENT",
    "imagenet": "suite.data.vision.imagenet:COMPONENT",
    "pydoc_topics": "suite.data.text.streams:PYDOC_TOPICS",
    "austen": "suite.data.text.streams:AUSTEN",
    "fineweb10B": "suite.data.text.streams:SHARDS",
    "drosophila": "suite.data.graph.drosophila:COMPONENT",
    "solubility": "suite.data.graph.solubility:COMPONENT",
    "ogbg_molpcba": "suite.data.graph.ogbg:COMPONENT",
    "gym": "suite.data.rl.gym_env:COMPONENT",
    "megatron_indexed": "suite.data.text.megatron_indexed:COMPONENT",   # .bin + .idx (MLPerf LLM references' C4)
    "lora_text": "suite.data.text.lora_text:COMPONENT",   # an Austen-pretrained Llama base + pydoc topics to fine-tune on
    "govreport": "suite.data.text.govreport:COMPONENT",   # MLPerf llama2_70b_lora's preprocessed GovReport (parquet)
    "arithmetic": "suite.data.rl.arithmetic:COMPONENT",   # seeded multi-digit addition problems (GRPO)
    "bugfix_repos": "suite.data.rl.bugfix_repos:COMPONENT",   # generated repos with a one-line bug (agentic GRPO)
    "r2e_gym": "suite.data.rl.r2e_gym:COMPONENT",   # MLPerf qwen35_397b_grpo's R2E-Gym task JSONL (NeMo Gym rows)
    "gsm8k": "suite.data.rl.gsm8k:COMPONENT",             # GSM8K from a local path: veRL parquet or the jsonl (GRPO)
    "flux_latents": "suite.data.diffusion.flux_latents:COMPONENT",   # MLPerf flux1's preprocessed CC12M / COCO (Arrow)
    "yambda": "suite.data.rec.yambda:COMPONENT",   # MLPerf dlrmv4's processed Yambda (parquet + npy + json)
    "criteo_1tb": "suite.data.rec.criteo:COMPONENT",   # MLPerf dlrm_dcnv2's preprocessed days (npy + multi-hot npz)
    "movielens_100k": "suite.data.rec.movielens:COMPONENT",   # RecBole 1.2.1's wheel's ml-100k atomic files
}

# What spec validation reads of a registered component, in a module that imports no torch (nor numpy) where the
# component's own module does: a task's class holding `reported_metrics` and `check_spec` (its workload class
# subclasses it: suite/workloads/checks.py), a model's or data set's pydantic `Config` (the very class its COMPONENT
# holds). A name not listed here, and a plug-in `pkg.mod:Name`, is imported whole to be checked.
# tests/workloads/test_spec_parts.py holds each to its component and to importing nothing heavy.
TASK_CHECKS: dict[str, str] = {
    "image_classification": "suite.workloads.checks:ImageClassificationChecks",
    "image_folder_classification": "suite.workloads.checks:ImageFolderClassificationChecks",
    "language_model": "suite.workloads.checks:LanguageModelChecks",
    "causal_lm_samples": "suite.workloads.checks:CausalLMSamplesChecks",
    "node_classification": "suite.workloads.checks:NodeClassificationChecks",
    "graph_classification": "suite.workloads.checks:GraphClassificationChecks",
    "ppo": "suite.workloads.checks:PPOChecks",
    "grpo": "suite.workloads.checks:GRPOChecks",
    "agentic_grpo": "suite.workloads.checks:AgenticGRPOChecks",
    "diffusion": "suite.workloads.checks:DiffusionChecks",
    "sequential_recommendation": "suite.workloads.checks:SequentialRecommendationChecks",
    "streaming_recommendation": "suite.workloads.checks:SequentialRecommendationChecks",
    "click_through": "suite.workloads.checks:WindowedChecks",
    "criteo_click_through": "suite.workloads.checks:WindowedChecks",
}
MODEL_CONFIGS: dict[str, str] = {
    "cnn": "suite.models.vision.cnn_config:Config",
    "gpt": "suite.models.gpt.config:Config",
    "llama": "suite.models.llama.config:Config",
    "hf_llama": "suite.models.hf.config:Config",
    "resnet": "suite.models.vision.resnet_config:Config",
    "airbench": "suite.models.vision.airbench_config:Config",
    "gcn": "suite.models.graph.gcn_config:Config",
    "gin": "suite.models.graph.gin_config:Config",
    "ppo_mlp": "suite.models.rl.ppo_mlp_config:Config",
    "flux": "suite.models.flux.config:Config",
    "hstu": "suite.models.recsys.hstu_config:Config",
    "dcnv2": "suite.models.recsys.dcnv2_config:Config",
}
DATASET_CONFIGS: dict[str, str] = {
    "digits": "suite.data.vision.digits_config:Config",
    "fashion_mnist": "suite.data.vision.fashion_mnist_config:Config",
    "cifar10": "suite.data.vision.cifar10_config:Config",
    "imagenet": "suite.data.vision.imagenet_config:Config",
    "pydoc_topics": "suite.data.text.streams_config:CharConfig",
    "austen": "suite.data.text.streams_config:AustenConfig",
    "fineweb10B": "suite.data.text.streams_config:ShardConfig",
    "drosophila": "suite.data.graph.drosophila_config:Config",
    "solubility": "suite.data.graph.solubility_config:Config",
    "ogbg_molpcba": "suite.data.graph.ogbg_config:Config",
    "megatron_indexed": "suite.data.text.megatron_indexed_config:Config",
    "lora_text": "suite.data.text.lora_text_config:Config",
    "govreport": "suite.data.text.govreport_config:Config",
    "arithmetic": "suite.data.rl.arithmetic_config:Config",
    "bugfix_repos": "suite.data.rl.bugfix_repos_config:Config",
    "gsm8k": "suite.data.rl.gsm8k_config:Config",
    "flux_latents": "suite.data.diffusion.flux_latents_config:Config",
    "yambda": "suite.data.rec.yambda_config:Config",
    "criteo_1tb": "suite.data.rec.criteo_config:Config",
    "movielens_100k": "suite.data.rec.movielens_config:Config",
}

# backend name -> class implementing suite.backends.base.Backend
BACKENDS: dict[str, str] = {
    "torch": "suite.backends.torch.backend:TorchBackend",
    "deepspeed": "suite.backends.deepspeed.backend:DeepSpeedBackend",
    "megatron": "suite.backends.megatron.backend:MegatronBackend",
    "npu": "suite.backends.npu.backend:NpuBackend",
    "torchtitan": "suite.backends.torchtitan.backend:TorchtitanBackend",   # torchtitan's Llama 3 / DeepSeek-V3 models and parallelize fns
    "verl": "suite.backends.verl.backend:VerlBackend",   # task grpo on CUDA nodes; says why not on CPU (verl#3266)
}


class RegistryError(LookupError):
    pass


def resolve(ref: str, table: dict[str, str] | None = None, kind: str = "component") -> Any:
    """A registered name or an import path `pkg.module:attr` -> the object. Clear error if it does not resolve."""
    target = table.get(ref) if table is not None else None
    if target is None:
        if ":" not in ref:
            known = ", ".join(sorted(table)) if table else ""
            raise RegistryError(f"unknown {kind} {ref!r}; known: {known} (or give an import path `pkg.module:Name`)")
        target = ref
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - ImportError, and "" or "..x" (ValueError, TypeError), or a module that raises
        raise RegistryError(f"{kind} {ref!r}: cannot import module {module_name!r}: {type(e).__name__}: {e}") from None
    try:
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise RegistryError(f"{kind} {ref!r}: module {module_name!r} has no attribute {attr!r}") from None
    return obj


def _validate_block(table: dict[str, str], configs: dict[str, str], name: str, params: dict[str, Any], loc: str,
                    kind: str):
    from pydantic import BaseModel, ValidationError

    from suite.spec import format_validation
    from suite.strict_numbers import bool_problems

    try:
        config_cls = config_class(name, table, configs, kind)
    except RegistryError as e:
        return [(loc, str(e))]
    if config_cls is None or not (isinstance(config_cls, type) and issubclass(config_cls, BaseModel)):
        return [(loc, f"{kind} {name!r} has no pydantic Config to validate its fields")]
    if problems := bool_problems(config_cls, params, f"{loc}."):
        return problems
    try:
        config_cls.model_validate(params)
    except ValidationError as e:
        return format_validation(e, loc)
    return []


def validate_components(spec: Any) -> list[tuple[str, str]]:
    """Validate the blocks whose fields belong to a component (model arch, data set, backend options), and the
    task name. The plug-ins (optimizer, schedule, loss, compression) are checked by suite.specload."""
    problems: list[tuple[str, str]] = []
    try:
        task = task_checks(spec.task)
        if not isinstance(task, type):  # `os:system` resolves too: only a class can be a workload
            problems.append(("task", f"task {spec.task!r} is a {type(task).__name__}, not a Workload class"))
        else:
            problems += _check_target_metric(task, spec)
            problems += _check_task_spec(task, spec)
    except RegistryError as e:
        problems.append(("task", str(e)))
    problems += _validate_block(MODELS, MODEL_CONFIGS, spec.model.arch, spec.model.params(), "model", "model arch")
    data_params = spec.data.params()
    problems += _validate_block(DATASETS, DATASET_CONFIGS, spec.data.name, data_params, "data", "data set")
    for backend, options in spec.backends.items():
        if backend not in BACKENDS:
            problems.append((f"backends.{backend}", f"unknown backend; known: {', '.join(sorted(BACKENDS))}"))
        else:
            problems += _validate_backend_block(backend, options)
    return problems


def _check_target_metric(task: type, spec: Any) -> list[tuple[str, str]]:
    """A target metric the task never reports would train the whole budget and end `budget`, without a word."""
    reported = getattr(task, "reported_metrics", None)
    if not reported or spec.target.metric in reported:
        return []
    return [("target.metric", f"{spec.target.metric!r} is not a metric task {spec.task!r} reports; it reports: "
             f"{', '.join(sorted(reported))}")]


def _check_task_spec(task: type, spec: Any) -> list[tuple[str, str]]:
    """A task's own cross-block checks (`check_spec(spec) -> [(field, problem)]`), where it declares any: what the
    model asks of the data set (a patch size that divides its images, a conditioning it has), before the run."""
    check = getattr(task, "check_spec", None)
    return list(check(spec)) if check is not None else []


def _validate_backend_block(name: str, block: dict[str, Any]) -> list[tuple[str, str]]:
    """A spec's `backends.<name>` block against that backend's pydantic Options (its module imports no framework)."""
    from pydantic import ValidationError

    from suite.spec import format_validation
    from suite.strict_numbers import bool_problems

    try:
        options = backend_options(name)
    except RegistryError as e:
        return [(f"backends.{name}", str(e))]
    if options is None:
        return [(f"backends.{name}", "this backend takes no options; remove the block")] if block else []
    if problems := bool_problems(options, block or {}, f"backends.{name}."):
        return problems
    try:
        options.model_validate(block or {})
    except ValidationError as e:
        return format_validation(e, f"backends.{name}")
    return []


def model_component(arch: str) -> Any:
    return resolve(arch, MODELS, "model arch")


def data_component(name: str) -> Any:
    return resolve(name, DATASETS, "data set")


def backend_class(name: str) -> type[Backend]:
    """The Backend subclass registered (or imported) as `name`; anything else is refused with what to do."""
    from suite.backends.base import Backend  # late: it imports torch, which spec validation may not need

    cls = resolve(name, BACKENDS, "backend")
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise RegistryError(f"backend {name!r} resolves to {cls!r}, which does not subclass "
                            "suite.backends.base.Backend (docs/writing-a-backend.md lists the contract)")
    return cls


def options_module(backend: str) -> str | None:
    """A registered engine's torch-free module: by convention `options` beside its class
    (suite/backends/<engine>/options.py), which holds what is known of the engine without importing it (`supports`,
    `limit`, `available_installed`, `FSDP_MECHANISM`, `Options`), so an engine is its folder plus its one registry
    line. None for a plug-in without that module."""
    path = BACKENDS.get(backend)
    if path is None:
        return None
    module = path.split(":")[0].rsplit(".", 1)[0] + ".options"
    try:
        return module if importlib.util.find_spec(module) is not None else None
    except ModuleNotFoundError:
        return None


def engine_attr(backend: str, name: str) -> Any:
    """`name` from the engine's options module (`options_module`), or None where the engine does not define it."""
    module = options_module(backend)
    if module is None:
        return None
    return getattr(importlib.import_module(module), name, None)


def backend_options(name: str) -> type[BaseModel] | None:
    """A backend's pydantic `Options` (None: it takes none) without importing its framework: `Options` of its options
    module (`options_module`, the very class the backend class has: tests/backends/test_support_matrix_torch_free.py),
    else the plug-in class's."""
    if options_module(name) is not None:
        return engine_attr(name, "Options")
    return backend_class(name).Options


def config_class(name: str, table: dict[str, str], configs: dict[str, str], kind: str) -> Any:
    """A model's or data set's pydantic Config: from its torch-free module where `configs` names one (MODEL_CONFIGS,
    DATASET_CONFIGS), else its component's (imported). None where the component has none."""
    if name in configs:
        return resolve(configs[name], kind=f"{kind} {name!r} config")
    return getattr(resolve(name, table, kind), "Config", None)


def model_config(arch: str) -> Any:
    return config_class(arch, MODELS, MODEL_CONFIGS, "model arch")


def data_config(name: str) -> Any:
    return config_class(name, DATASETS, DATASET_CONFIGS, "data set")


def task_checks(name: str) -> Any:
    """What spec validation reads of a task (`reported_metrics`, `check_spec`): its class in TASK_CHECKS (no torch),
    which the workload class subclasses, else the task class itself (imported)."""
    if name in TASK_CHECKS:
        return resolve(TASK_CHECKS[name], kind=f"task {name!r} checks")
    return resolve(name, TASKS, "task")


def task_class(name: str) -> Any:
    return resolve(name, TASKS, "task")


# ---- where the spec files live -------------------------------------------------------------------------


@cache
def workloads_root() -> Path:
    env = os.environ.get("TRAINBENCH_WORKLOADS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "workloads"


def workload_files() -> dict[str, Path]:
    """`cv/digits_cnn` -> its YAML path, for every spec under workloads/."""
    root = workloads_root()
    out = {}
    for path in sorted(root.glob("*/*.yaml")):
        out[f"{path.parent.name}/{path.stem}"] = path
    return out


def find_workload(ref: str) -> Path:
    """A workload name (`cv/digits_cnn`, or just `digits_cnn` when unique) or the path of a spec file."""
    files = workload_files()
    if ref in files:
        return files[ref]
    by_stem = [p for name, p in files.items() if name.split("/")[1] == ref]
    if len(by_stem) == 1:
        return by_stem[0]
    path = Path(ref)
    if path.suffix in (".yaml", ".yml"):  # a spec file a user wrote; anything else must be a workload name
        return path
    close = [n for n in files if ref.split("/")[-1][:4] in n]
    hint = f" Did you mean: {', '.join(close[:5])}?" if close else ""
    raise RegistryError(f"no workload {ref!r}: not a name under {root_hint()} nor a .yaml file.{hint} "
                        "`trainbench list` shows the workloads.")


def root_hint() -> str:
    return str(workloads_root())


class Component:
    """A model or data set component: its pydantic `Config` and its functions (`build`, `flops_per_sample`,
    `load`, `prepare`, ...), looked up by attribute like a module. `COMPONENT = Component(Config, build=build)`."""

    def __init__(self, config: type[BaseModel], **functions: Any):
        self.Config = config
        self.__dict__.update(functions)

    def __repr__(self) -> str:
        return f"Component({self.Config.__module__}: {', '.join(k for k in vars(self) if k != 'Config')})"
