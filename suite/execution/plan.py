"""From what the user asked for (names or a tier, --algo, --set, --variant, --precision) to checked RunRequests.

`trainbench run` and `trainbench study` both plan here, so a refusal (unknown workload, unsupported
workload x backend pair, an algorithm the device cannot do) reads the same from either, and happens before
any process or model starts. Every refusal is a `PlanError` whose message names the flag or file to fix.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

# Seeds are 0 .. 2**32 - 1, numpy's legacy range (the harness seeds numpy with seed % 2**32, so a larger seed would
# repeat a smaller one's data order) and far from the 64 bits the data orders' derived seeds (seed * 100_003 + epoch)
# must fit: `--seed 9223372036854775807` ended as an error result ("Overflow when unpacking long long").
MAX_SEED = 2**32 - 1


class PlanError(ValueError):
    """Bad input found while planning: nothing was started, nothing recorded (the CLI exits 2)."""


def check_seeds(first: int, count: int, flag: str = "--seed") -> None:
    """Every seed of first .. first + count - 1 within 0 .. MAX_SEED."""
    if not 0 <= first <= MAX_SEED or first + count - 1 > MAX_SEED:
        raise PlanError(f"{flag} {first}: seeds run from 0 to {MAX_SEED} (2**32 - 1)"
                        + (f"; with {count} seeds the first may be at most {MAX_SEED - count + 1}" if count > 1 else ""))


def preflight(names: list[str], tier: str | None, backend: str, sets: list[str], variant: str | None,
              algo: str | None) -> None:
    """The checks that need no torch, made before anything is imported or started (a typo'd workload, backend,
    tier, --set or --variant is answered in a fraction of a second): the names, and each named spec with its --set and
    --variant, whole (schema, components, plug-ins: suite/registry.py reads the registered components' torch-free parts;
    a plug-in named by import path is imported). `plan` makes every check again (layouts, the backend's support)."""
    from suite import registry

    if backend not in registry.BACKENDS and ":" not in backend:
        raise PlanError(f"--backend: unknown backend {backend!r}; known: {', '.join(sorted(registry.BACKENDS))} "
                        "(or give an import path `pkg.module:Name`)")
    _check_tier(tier)
    if not names and tier is None:
        resolve_workloads(names, tier)  # raises: nothing to run
    if not names:
        return
    paths = resolve_workloads(names, tier)  # a typo'd name is answered before pydantic and the schema are imported
    from suite.spec import SpecError, parse_override
    from suite.specload import load_spec

    if algo is not None:  # a bundle changes the spec before --set applies: plan() checks it whole
        return
    try:
        overrides = dict(parse_override(s) for s in sets)
        for path in paths:  # a missing file too: read_spec_file names it, as plan() would after importing torch
            load_spec(path, overrides, variant)
    except SpecError as e:
        raise PlanError(str(e)) from None


def _check_tier(tier: str | None) -> None:
    if tier is None:
        return
    from suite.spec import TIERS

    if tier not in TIERS:
        raise PlanError(f"--tier {tier!r}: expected one of {', '.join(TIERS)}")


def resolve_workloads(names: list[str], tier: str | None) -> list[Path]:
    """Spec paths for workload names (or paths), or for every workload of a tier."""
    from suite import registry

    _check_tier(tier)
    if names:
        try:
            return [registry.find_workload(n) for n in names]
        except registry.RegistryError as e:
            raise PlanError(str(e)) from None
    if tier is None:
        raise PlanError("name a workload (e.g. `trainbench run cv/digits_cnn`) or a tier (`--tier smoke`)")
    from suite.spec import SpecError
    from suite.specload import tier_workloads

    try:
        paths = tier_workloads(tier)
    except SpecError as e:
        raise PlanError(str(e)) from None
    if not paths:
        raise PlanError(f"no workload is in tier {tier!r}")
    return paths


def prepare_specs(paths: list[Path], algo: str | None, sets: list[str], variant: str | None,
                  precision: str | None) -> list[tuple[Path, Any]]:
    """Each spec with --algo, --variant and --set applied (a `bundles.Prepared` per path)."""
    from suite.algorithms import bundles
    from suite.spec import SpecError, parse_override

    try:
        overrides = dict(parse_override(s) for s in sets)
        return [(path, bundles.prepare(path, algo, overrides, variant, precision)) for path in paths]
    except (SpecError, bundles.AlgoError) as e:
        raise PlanError(str(e)) from None


def check_backend(backend: str) -> None:
    from suite import registry

    try:
        registry.backend_class(backend)
    except registry.RegistryError as e:
        raise PlanError(f"--backend: {e}") from None


def check_supported(backend: str, specs: list[tuple[Path, Any]], skip: bool = False,
                    note: Callable[[str], None] | None = None) -> list[tuple[Path, Any]]:
    """An unsupported workload x backend pair is bad input: refused before any process or model starts.

    With `skip` (a whole tier was asked for), unsupported workloads are left out with a `note` instead, and
    only a tier with nothing this backend can run is an error.
    """
    from suite import devices, registry
    from suite.backends.matrix import unsupported_reason

    avail = registry.backend_class(backend)(devices.current()).available()
    if not avail.ok:
        raise PlanError(f"--backend {backend} is not available here: {avail.reason}. `trainbench env` lists "
                        "the backends and why each is or is not available.")
    kept = []
    for path, prepared in specs:
        spec = prepared.spec  # a bundles.Prepared: the spec after --algo and --set
        reason = unsupported_reason(backend, spec)
        if not reason:
            kept.append((path, prepared))
        elif skip:
            if note is not None:
                note(f"skipping {spec.name}: not supported by --backend {backend}: {reason}")
        else:
            raise PlanError(f"{spec.name} ({path}) cannot run on --backend {backend}: {reason}. "
                            "`trainbench list --matrix` shows the supported pairs.")
    if not kept:
        raise PlanError(f"no workload of this tier runs on --backend {backend}; `trainbench list --matrix`")
    return kept


def refuse_algorithms(prepared_specs: list[Any], backend: str) -> None:
    """Precision or compression this backend / device cannot do: refused with the reason, before any run."""
    from suite import devices
    from suite.algorithms import plugins

    device_type = devices.detect_type()
    for prepared in prepared_specs:
        prepared.fit_precision(device_type)  # the spec's own recipe maps to what the device can do
        reasons = plugins.refusals(prepared.spec, backend, prepared.precision, device_type)
        if reasons:
            raise PlanError("; ".join(reasons))


def check_layouts(specs: list[tuple[Path, Any]], world: int) -> None:
    """A layout (`--parallel`, the spec's `parallel:` block) whose degrees do not multiply to the process count,
    or a micro-batch that does not divide the local batch: refused before any process starts."""
    from suite.backends import layout

    for path, prepared in specs:
        reason = layout.check(prepared.spec, world)
        if reason:
            raise PlanError(f"{prepared.spec.name} ({path}): {reason}")


def plan(names: list[str], tier: str | None, backend: str, *, sets: list[str] | None = None,
         variant: str | None = None, precision: str | None = None, algo: str | None = None,
         note: Callable[[str], None] | None = None, world: int = 1) -> list[tuple[Path, Any]]:
    """Every check `run` makes before it starts anything; the prepared specs that will run."""
    check_backend(backend)
    specs = prepare_specs(resolve_workloads(names, tier), algo, sets or [], variant, precision)
    check_layouts(specs, world)
    specs = check_supported(backend, specs, skip=not names, note=note)
    refuse_algorithms([prepared for _, prepared in specs], backend)
    return specs


def requests(specs: list[tuple[Path, Any]], backend: str, seeds: range, **options: Any) -> list[Any]:
    """One RunRequest per (spec, seed), in order: every seed of a workload before the next workload."""
    from suite.harness import RunRequest

    compile_flag = options.pop("compile", None)  # --compile / --no-compile win over the spec's `compile`
    return [
        RunRequest(spec=prepared.spec, backend=backend, seed=s, precision=prepared.precision,
                   overrides=prepared.overrides, spec_source=str(path), extra_config=prepared.extra_config,
                   compile=bool(prepared.spec.compile if compile_flag is None else compile_flag), **options)
        for path, prepared in specs
        for s in seeds
    ]
