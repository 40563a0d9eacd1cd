"""Studies: workloads x algorithms x seeds, run by an executor, scored with AlgoPerf performance profiles.

`trainbench study studies/X.yaml` validates everything first (each workload with each algorithm: user
code is imported and checked before the first run), runs every cell (sequentially by the local executor),
aggregates each (workload, algorithm) over seeds with MLPerf's olympic mean (a miss is infinitely slow),
scores with suite/studies/profiles.py, and writes study.json, study.md, profile.svg and study.html.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from suite import registry
from suite.algorithms import bundles
from suite.execution.plan import MAX_SEED
from suite.results import stats
from suite.results.record import Result, now_utc
from suite.spec import TIERS, SpecError, format_validation, parse_yaml, read_spec_file
from suite.specload import tier_workloads
from suite.studies import profile_plot, profiles
from suite.studies import report as study_report

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")
TEMPLATES = Path(__file__).resolve().parent  # study.html, the standalone study page, ships in the package


class StudyError(ValueError):
    pass


class StudySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="lower-case name; the output folder's name")
    description: str = ""
    tier: Literal["smoke", "standard", "full"] | None = Field(default=None, description="every workload of a tier")
    workloads: list[str] = Field(default_factory=list, description="workload names or spec paths (or use tier)")
    variant: str | None = Field(default=None, description="a variant every workload must define, e.g. tiny")
    set: dict[str, Any] = Field(default_factory=dict, description="--set overrides applied to every workload")
    algorithms: list[str | dict[str, Any]] = Field(
        min_length=1, description="each a --algo value (bundle, bundle .yaml, import path) or an inline bundle")
    seeds: int = Field(default=3, ge=1)
    first_seed: int = Field(default=0, ge=0, le=MAX_SEED)
    backend: str = "torch"
    precision: str | None = Field(default=None, description="overrides every bundle's precision")
    tau_max: float = Field(default=profiles.DEFAULT_TAU_MAX, gt=1)
    executor: Literal["inline", "local", "ray"] = Field(
        default="inline", description="where the runs execute, as `trainbench run --executor` (each run isolated)")
    jobs: int = Field(default=1, ge=1, description="with executor local: runs at once on this machine")

    @model_validator(mode="after")
    def _check(self) -> StudySpec:
        if not _NAME_RE.match(self.name):
            raise ValueError(f"name {self.name!r}: lower-case letters, digits, '_' or '-'")
        if (self.tier is None) == (not self.workloads):
            raise ValueError("give exactly one of `tier` (e.g. smoke) or a `workloads` list")
        if self.first_seed + self.seeds - 1 > MAX_SEED:
            raise ValueError(f"seeds run from 0 to {MAX_SEED}: first_seed {self.first_seed} + {self.seeds} seeds "
                             "goes past it")
        return self


def load_study(path: Path) -> StudySpec:
    data = read_spec_file(path)
    try:
        return StudySpec.model_validate(data)
    except ValidationError as e:
        raise SpecError(str(path), format_validation(e)) from None


@dataclass
class Cell:
    """One workload with one algorithm applied, validated: `seeds` runs of it make the cell's time."""

    workload: str
    path: Path
    label: str
    prepared: bundles.Prepared


def workload_paths(st: StudySpec, base_dir: Path) -> list[Path]:
    if st.tier is not None:
        assert st.tier in TIERS
        paths = tier_workloads(st.tier)
        if not paths:
            raise StudyError(f"no workload is in tier {st.tier!r}")
        return paths
    out = []
    for ref in st.workloads:
        local = base_dir / ref
        try:
            out.append(local if ref.endswith((".yaml", ".yml")) and local.exists() else registry.find_workload(ref))
        except registry.RegistryError as e:
            raise StudyError(f"workloads: {e}") from None
    return out


def plan(st: StudySpec, base_dir: Path) -> list[Cell]:
    """Every (workload, algorithm) validated before anything runs; errors name the workload and algorithm."""
    cells: list[Cell] = []
    labels: list[str] = []
    for path in workload_paths(st, base_dir):
        if st.variant and st.variant not in (read_spec_file(path).get("variants") or {}):
            raise StudyError(f"{path}: has no variant {st.variant!r} (the study asks every workload for it)")
        for algo in st.algorithms:
            try:
                prepared = bundles.prepare(path, algo, dict(st.set), st.variant, st.precision, base_dir)
            except bundles.AlgoError as e:
                raise StudyError(f"algorithms: {e}") from None
            label = prepared.extra_config["algorithm"]["label"]
            cells.append(Cell(prepared.spec.name, path, label, prepared))
            if len(labels) < len(st.algorithms):
                labels.append(label)
    if len(set(labels)) != len(labels):
        raise StudyError(f"algorithms: two algorithms share a label ({labels}); give inline bundles a `name`")
    return cells


def requests_for(st: StudySpec, cells: list[Cell], results_dir: Path | None, threads: int | None) -> list[Any]:
    from suite.harness import RunRequest

    reqs = []
    for cell in cells:
        p = cell.prepared
        for seed in range(st.first_seed, st.first_seed + st.seeds):
            extra = {**p.extra_config, "study": {"name": st.name, "algorithm": cell.label}}
            reqs.append(RunRequest(
                spec=p.spec, backend=st.backend, seed=seed, precision=p.precision, threads=threads,
                results_dir=results_dir, tier=st.tier, overrides=p.overrides, variant=st.variant,
                spec_source=str(cell.path), extra_config=extra, compile=bool(p.spec.compile),
            ))
    return reqs


def record(r: Result, path: Path | None) -> dict[str, Any]:
    return {
        "workload": r.workload, "algorithm": r.config.get("study", {}).get("algorithm"), "seed": r.seed,
        "status": r.status, "time_to_target_s": r.time_to_target_s, "train_s": r.train_s,
        "steps_to_target": r.steps_to_target, "steps": r.steps, "final_metrics": r.final_metrics,
        "run_id": r.run_id, "path": str(path) if path else None, "error": r.error, "hardware": r.hardware.slug,
    }


def score(records: list[dict[str, Any]], algorithms: list[str], tau_max: float) -> dict[str, Any]:
    """Records of runs -> per-cell times, ratios, profiles and integrated scores."""
    workloads = sorted({rec["workload"] for rec in records})
    times: dict[str, dict[str, float]] = {w: {} for w in workloads}
    for w in workloads:
        for a in algorithms:
            ttas = [stats.tta_of(rec["status"], rec["time_to_target_s"])
                    for rec in records if rec["workload"] == w and rec["algorithm"] == a]
            times[w][a] = stats.olympic_mean(ttas) if ttas else math.inf  # as stats.aggregate's tta_olympic_s
    r = profiles.ratios(times, algorithms)
    rows: list[dict[str, Any]] = []
    for a in algorithms:
        rows.append({
            "algorithm": a,
            "score": profiles.integrated_score(r[a], tau_max),
            "workloads_reached": sum(1 for w in workloads if math.isfinite(times[w][a])),
            "workloads": len(workloads),
            "rho": {str(t): profiles.rho(r[a], t) for t in (1.0, 1.25, 1.5, 2.0, 3.0, tau_max)},
        })
    rows.sort(key=lambda row: -float(row["score"]))
    return {"times_s": times, "ratios": r, "scores": rows,
            "profiles": {a: profiles.curve(r[a], tau_max) for a in algorithms}}


def run_study(st: StudySpec, cells: list[Cell], results_dir: Path | None = Path("results"),
              threads: int | None = None, options: Any = None, control: Any = None) -> dict[str, Any]:
    """Run every cell's seeds through the launcher (suite/execution/launch.py) and score what came back."""
    from suite.execution import launch

    labels = list(dict.fromkeys(c.label for c in cells))
    options = options or launch.Options(executor=st.executor, jobs=st.jobs)
    records = []
    for o in launch.launch(requests_for(st, cells, results_dir, threads), options, control):
        if o.data_missing and options.executor == "inline":
            from suite.data.base import DataMissing

            raise DataMissing(o.data_missing)  # this machine lacks the data: bad input, nothing scored
        records.append(record(o.result, o.path))
    scored = score(records, labels, st.tau_max)
    return {
        "study": st.model_dump(mode="json"),
        "generated_at": now_utc().isoformat(),
        "tau_max": st.tau_max,
        "aggregation": "per (workload, algorithm): olympic mean of time to target over seeds (MLPerf); "
                       "a run that missed the target is infinitely slow (null in JSON)",
        "algorithms": labels,
        "algorithm_details": {c.label: c.prepared.extra_config["algorithm"] for c in cells},
        "runs": records,
        "errors": sum(1 for rec in records if rec["status"] in ("error", "interrupted")),
        **scored,
    }


# ---- outputs ----------------------------------------------------------------------------------------------


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


def _fmt_s(t: float) -> str:
    return f"{t:.2f} s" if math.isfinite(t) else "missed"


def _fmt_ratio(r: float) -> str:
    return f"{r:.2f}" if math.isfinite(r) else "inf"


def markdown(report: dict[str, Any]) -> str:
    tau_max = report["tau_max"]
    algos = report["algorithms"]
    st = report["study"]
    lines = [
        f"## Study `{st['name']}`: performance-profile scores (tau_max = {tau_max:g})", "",
        f"{len(report['times_s'])} workloads x {len(algos)} algorithms x {st['seeds']} seeds, backend "
        f"{st['backend']}. Score = (1/(tau_max-1)) * integral of rho(tau) from 1 to tau_max, exact; "
        "time per cell = olympic mean over seeds; a miss counts as infinitely slow.", "",
        "| rank | algorithm | score | workloads reached | rho(1) | rho(1.5) | rho(2) |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for i, row in enumerate(report["scores"], 1):
        rho = row["rho"]
        lines.append(f"| {i} | {row['algorithm']} | {row['score']:.3f} | {row['workloads_reached']}/"
                     f"{row['workloads']} | {rho['1.0']:.2f} | {rho['1.5']:.2f} | {rho['2.0']:.2f} |")
    lines += ["", "| workload | " + " | ".join(f"{a} (ratio)" for a in algos) + " |",
              "|---|" + "---:|" * len(algos)]
    for w, per in report["times_s"].items():
        cells = [f"{_fmt_s(per[a])} ({_fmt_ratio(report['ratios'][a][w])})" for a in algos]
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _profile_svg(report: dict[str, Any]) -> str:
    """The same plot the site draws (suite/studies/profile_plot.py) from the typed report study.json reads back as."""
    return profile_plot.profile_svg(study_report.report_from_json(_finite_or_none(report), "<study>"))


def html(report: dict[str, Any]) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    rows = []
    for w, per in report["times_s"].items():
        rows.append({"workload": w, "cells": [{"time": _fmt_s(per[a]), "ratio": _fmt_ratio(report["ratios"][a][w])}
                                              for a in report["algorithms"]]})
    return env.get_template("study.html").render(
        report=report, study=report["study"], scores=report["scores"], algorithms=report["algorithms"],
        workload_rows=rows, svg=_profile_svg(report), details=report["algorithm_details"],
    )


def write_outputs(report: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "study.json": json.dumps(_finite_or_none(report), indent=2, default=str) + "\n",
        "study.md": markdown(report) + "\n",
        "profile.svg": _profile_svg(report) + "\n",
        "study.html": html(report),
    }
    paths = []
    for name, text in files.items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def parse_study_text(text: str, source: str = "<study>") -> StudySpec:
    data = parse_yaml(text, source)
    try:
        return StudySpec.model_validate(data)
    except ValidationError as e:
        raise SpecError(source, format_validation(e)) from None
