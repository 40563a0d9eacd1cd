"""What spec validation reads of each task, without torch: the metrics it reports (`reported_metrics`: a target
metric it never reports is refused), whether a `loss:` block may replace its loss (`loss_hook`) and its cross-block
checks (`check_spec(spec) -> [(field, problem)]`, where it has any). Each workload class subclasses its class here, so these are the very attributes it has; suite/registry.py
TASK_CHECKS names them, and tests/workloads/test_spec_parts.py holds each to its workload.
"""

from __future__ import annotations

from typing import Any, ClassVar

from suite.models.flux.config import Config as FluxConfig


class ImageClassificationChecks:
    reported_metrics: ClassVar[frozenset[str]] = frozenset({"accuracy", "loss"})
    loss_hook = True  # the spec's `loss:` may replace cross-entropy (suite/algorithms/losses.py)


class ImageFolderClassificationChecks:
    reported_metrics: ClassVar[frozenset[str]] = frozenset({"accuracy", "top5", "loss"})
    loss_hook = True  # the spec's `loss:` may replace cross-entropy (MLPerf's label smoothing 0.1)


class LanguageModelChecks:
    reported_metrics: ClassVar[frozenset[str]] = frozenset({"val_loss", "bits_per_token"})


class CausalLMSamplesChecks:
    reported_metrics: ClassVar[frozenset[str]] = frozenset({"eval_loss"})


class NodeClassificationChecks:
    reported_metrics: ClassVar[frozenset[str]] = frozenset({"accuracy", "loss", "train_accuracy"})


class GraphClassificationChecks:
    reported_metrics: ClassVar[frozenset[str]] = frozenset({"accuracy", "ap", "loss"})  # ap: multi-task binary data


class PPOChecks:
    reported_metrics: ClassVar[frozenset[str]] = frozenset({"mean_return", "min_return", "mean_length", "env_steps",
                                                            "episodes"})


class GRPOChecks:
    reported_metrics: ClassVar[frozenset[str]] = frozenset({"accuracy", "mean_reward", "mean_completion_tokens"})


class AgenticGRPOChecks:
    reported_metrics: ClassVar[frozenset[str]] = frozenset({"pass_at_k", "pass_at_1", "mean_turns"})


class WindowedChecks:
    """Click-through tasks over temporal windows (recsys.py's _Windowed)."""

    reported_metrics: ClassVar[frozenset[str]] = frozenset({"auc", "loss"})


class SequentialRecommendationChecks:
    reported_metrics: ClassVar[frozenset[str]] = frozenset({"auc", "loss", "hr@10", "ndcg@10"})


# ---- diffusion: the model's shape against what the named data set offers ------------------------------------------

# image data sets the diffusion task reads, known before any file is read (so a spec is refused before the run starts)
IMAGE_SETS: dict[str, tuple[tuple[int, int, int], int]] = {"digits": ((1, 8, 8), 10), "fashion_mnist": ((1, 28, 28), 10)}


def conditioning_sources(num_classes: int | None) -> dict[str, dict[str, int]]:
    """What conditioning an image set with labels offers: its labels (one one-hot token), or none."""
    out = {"none": {"context_dim": 1, "vec_dim": 1, "tokens": 1}}
    if num_classes:
        out["label"] = {"context_dim": num_classes, "vec_dim": num_classes, "tokens": 1}
    return out


def static_meta(spec: Any) -> dict[str, Any] | None:
    """The data set's latent shape and conditioning sources from the spec alone (no file read), where known: an image
    set above, or a data set whose Config has `describe()` (flux_latents)."""
    if spec.data.name in IMAGE_SETS:
        shape, classes = IMAGE_SETS[spec.data.name]
        return {"latent_shape": shape, "conditioning": conditioning_sources(classes)}
    from suite import registry

    try:
        cfg = registry.data_config(spec.data.name).model_validate(spec.data.params())
    except Exception:  # noqa: BLE001 - the data block's own check reports it
        return None
    describe = getattr(cfg, "describe", None)
    return describe() if describe is not None else None


def check_shapes(cfg: FluxConfig, meta: dict[str, Any], data_name: str) -> list[tuple[str, str]]:
    problems = []
    _, h, w = meta["latent_shape"]
    if h % cfg.patch_size or w % cfg.patch_size:
        problems.append(("model.patch_size", f"{cfg.patch_size} does not divide the image size {h}x{w} of data set "
                         f"{data_name!r}: choose a patch size dividing {h} and {w}"))
    if cfg.conditioning not in meta["conditioning"]:
        problems.append(("model.conditioning", f"data set {data_name!r} has no {cfg.conditioning!r} conditioning; it "
                         f"offers: {', '.join(sorted(meta['conditioning']))}"))
    return problems


class DiffusionChecks:
    reported_metrics: ClassVar[frozenset[str]] = frozenset({"val_loss"})

    @staticmethod
    def check_spec(spec: Any) -> list[tuple[str, str]]:
        """Refusals before the run starts: the model's shape against what the named data set offers."""
        try:
            cfg = FluxConfig.model_validate(spec.model.params())
        except Exception:  # noqa: BLE001 - the model block's own check reports it
            return []
        if spec.model.arch != "flux":
            return [("model.arch", f"task diffusion trains arch flux, not {spec.model.arch!r}")]
        meta = static_meta(spec)
        return check_shapes(cfg, meta, spec.data.name) if meta else []
