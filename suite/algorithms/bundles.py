"""Named algorithm bundles for `--algo`: an optimizer (and schedule, loss, compression, precision) swapped in
without editing the spec, and the record of exactly what ran.

`--algo` takes, in this order: a built-in bundle name (below), a bundle YAML file (the same fields), an
import path `pkg.module:Class` of a torch optimizer, or a built-in optimizer name. A bundle's block replaces
the spec's whole block; an optimizer block that omits `lr` or `weight_decay` keeps the workload's own
(its tuned values), so `--algo mypkg.opt:MyOpt` runs MyOpt at the workload's lr. `--set` applies after.
Like AlgoPerf's fixed-hyperparameter track, a bundle's hyperparameters are the same on every workload.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from suite.algorithms import optimizer_params, plugins
from suite.algorithms import precision as recipes
from suite.spec import SpecError, format_validation, parse_yaml
from suite.specload import load_spec


class Bundle(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, description="label shown in results and study tables")
    description: str = ""
    optimizer: dict[str, Any] | None = Field(default=None, description="replaces the spec's optimizer block")
    schedule: dict[str, Any] | None = None
    loss: str | dict[str, Any] | None = None
    compression: dict[str, Any] | None = None
    precision: str | None = Field(default=None, description="fp32 | bf16 | fp16 | bf16_master (unless --precision)")


def _b(name: str, description: str, **blocks: Any) -> Bundle:
    return Bundle(name=name, description=description, **blocks)


BUNDLES: dict[str, Bundle] = {
    b.name: b
    for b in (
        _b("adamw", "AdamW at the workload's own lr and weight decay (the spec's baseline)",
           optimizer={"name": "adamw"}),
        _b("sgd", "SGD, Nesterov momentum 0.9, lr 0.05", optimizer={"name": "sgd_nesterov", "lr": 0.05,
                                                                     "momentum": 0.9}),
        _b("lion", "Lion (Chen et al. 2023), lr 1e-3 (3x under AdamW's 3e-3), betas (0.9, 0.99), weight decay 1e-2",
           optimizer={"name": "lion", "lr": 1e-3, "weight_decay": 1e-2}),
        _b("muon", "Muon lr 0.02 momentum 0.95 for matrices, AdamW lr 3e-3 for the rest",
           optimizer={"name": "muon", "lr": 0.02, "adamw_lr": 3e-3}),
        _b("adamw_cosine", "the workload's AdamW with a cosine decay over budget.max_steps",
           optimizer={"name": "adamw"}, schedule={"name": "cosine"}),
        _b("label_smoothing", "the workload's optimizer, loss with label smoothing 0.1",
           loss={"name": "label_smoothing", "smoothing": 0.1}),
        _b("prune50", "the workload's optimizer, magnitude pruning to 50% sparsity by step 200",
           compression={"name": "magnitude_prune", "sparsity": 0.5, "end_step": 200}),
        _b("qat_int8", "the workload's optimizer, int8 fake-quantised weights and activations",
           compression={"name": "int8_qat"}),
        _b("bf16", "bf16 autocast", precision="bf16"),
        _b("fp16", "fp16 autocast with dynamic loss scaling", precision="fp16"),
        _b("bf16_master", "bf16 weights with fp32 master copies", precision="bf16_master"),
    )
}


class AlgoError(ValueError):
    pass


def load_bundle_file(path: Path) -> Bundle:
    try:
        data = parse_yaml(path.read_text(encoding="utf-8"), str(path))
    except OSError as e:
        raise AlgoError(f"--algo {path}: cannot read: {e}") from None
    if not isinstance(data, dict):
        raise AlgoError(f"{path}: a bundle is a mapping (name, optimizer, schedule, loss, compression, precision)")
    data.setdefault("name", path.stem)
    try:
        return Bundle.model_validate(data)
    except ValidationError as e:
        raise AlgoError(str(SpecError(str(path), format_validation(e)))) from None


def resolve(ref: str | dict[str, Any], base_dir: Path | None = None) -> tuple[Bundle, dict[str, Any]]:
    """`--algo` value (or a study's inline mapping) -> (bundle, where it came from)."""
    if isinstance(ref, dict):
        try:
            return Bundle.model_validate(ref), {"kind": "inline"}
        except ValidationError as e:
            raise AlgoError(str(SpecError("algorithm", format_validation(e)))) from None
    if ref in BUNDLES:
        return BUNDLES[ref], {"kind": "builtin bundle"}
    if ref.endswith((".yaml", ".yml")):
        path = Path(ref)
        if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
            path = base_dir / path
        if not path.exists():
            raise AlgoError(f"--algo {ref}: no such bundle file")
        bundle = load_bundle_file(path)
        return bundle, {"kind": "bundle file", "file": str(path.resolve()),
                        "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    if ":" in ref or ref in optimizer_params.OPTIMIZERS:
        return Bundle(name=ref, description="optimizer swapped in by --algo", optimizer={"name": ref}), {
            "kind": "optimizer"}
    raise AlgoError(
        f"--algo {ref!r}: not a bundle ({', '.join(BUNDLES)}), a .yaml bundle file, an optimizer "
        f"({', '.join(optimizer_params.OPTIMIZERS)}) or an import path `pkg.module:Class`"
    )


def overrides_for(bundle: Bundle, base: Any) -> dict[str, Any]:
    """The whole-block overrides a bundle makes to a spec (`base`, the spec as the workload defines it)."""
    out: dict[str, Any] = {}
    if bundle.optimizer is not None:
        block = dict(bundle.optimizer)
        if "name" not in block:
            raise AlgoError(f"algorithm {bundle.name!r}: optimizer block needs a name")
        block.setdefault("lr", base.optimizer.lr)
        block.setdefault("weight_decay", base.optimizer.weight_decay)
        out["optimizer"] = block
    for key in ("schedule", "loss", "compression"):
        value = getattr(bundle, key)
        if value is not None:
            out[key] = value
    return out


def _blame_algo(e: SpecError, algo: Any, from_algo: set[str]) -> SpecError:
    """A problem in a block --algo wrote names --algo, not a `--set optimizer={...}` the user never typed."""
    ref = algo if isinstance(algo, str) else "(study algorithm)"
    problems = []
    for loc, msg in e.problems:
        for key in from_algo:
            msg = re.sub(rf" \(from --set {re.escape(key)}=.*\)$", f" (from --algo {ref})", msg, flags=re.S)
        problems.append((loc, msg))
    return SpecError(e.source, problems)


@dataclass
class Prepared:
    """One workload with one algorithm applied: the validated spec and what the result must record."""

    spec: Any
    overrides: dict[str, Any]
    precision: str
    extra_config: dict[str, Any] = field(default_factory=dict)

    def fit_precision(self, device_type: str) -> None:
        """A recipe the spec asks for and this device cannot do falls back to fp32, recorded with the reason
        (a full-tier spec's bf16 on a GPU without bf16, or wherever the probe fails). One asked for by
        --precision or --algo is not mapped: the plan refuses it."""
        if self.extra_config.get("precision_source") != "spec" or self.precision == "fp32":
            return
        reason = recipes.unsupported_reason(self.precision, device_type)
        if reason:
            self.extra_config["precision_fallback"] = {"asked": self.precision, "ran": "fp32", "reason": reason}
            self.extra_config["algorithm"]["precision"] = recipes.describe("fp32")
            self.precision = "fp32"


def prepare(
    path: Path, algo: str | dict[str, Any] | None, user_overrides: dict[str, Any], variant: str | None,
    precision: str | None, base_dir: Path | None = None,
) -> Prepared:
    """Load `path` with the algorithm, then the user's --set; raises SpecError / AlgoError before anything runs."""
    bundle, source = (None, {"kind": "spec"}) if algo is None else resolve(algo, base_dir)
    overrides = dict(user_overrides)
    if bundle is not None:
        base = load_spec(path, None, variant)  # the workload as defined: its lr and weight decay
        overrides = {**overrides_for(bundle, base), **user_overrides}
    try:
        spec = load_spec(path, overrides, variant)
    except SpecError as e:
        if bundle is None:
            raise
        raise _blame_algo(e, algo, set(overrides) - set(user_overrides)) from None
    chosen, chosen_by = choose_precision(precision, bundle.precision if bundle is not None else None, spec.precision)
    record = {
        "label": bundle.name if bundle is not None else "spec",
        "ref": algo if isinstance(algo, str) else (bundle.name if bundle is not None else None),
        "source": source,
        "bundle": bundle.model_dump(exclude_none=True) if bundle is not None else None,
        **plugins.describe(spec, chosen),
    }
    return Prepared(spec=spec, overrides=overrides, precision=chosen,
                    extra_config={"algorithm": record, "precision_source": chosen_by})


def choose_precision(flag: str | None, bundle: str | None, spec: str | None) -> tuple[str, str]:
    """The recipe that runs and who chose it: --precision, else the --algo bundle's, else the spec's, else fp32."""
    for value, source in ((flag, "--precision"), (bundle, "--algo"), (spec, "spec")):
        if value is not None:
            return value, source
    return "fp32", "default"
