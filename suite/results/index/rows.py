"""What the index holds of one result: the typed `runs` row and the `series` rows, computed once per file.

Every figure a reader needs is a column here, computed by the same functions the readers used on a full
Result (suite.results.stats, suite.results.conditions, suite.results.key): the site's leaderboards, workload pages and run
lists, compare and history then read columns, never the result JSON (kept in `result` for the pages that
show every field). The site's file walk (TRAINBENCH_INDEX=0) builds its rows with this same function, so the
two roads cannot disagree.
"""

from __future__ import annotations

import json
import time
from typing import Any

from suite.results import record as results_mod

RUN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("path", "VARCHAR"), ("source", "VARCHAR"), ("run_id", "VARCHAR"), ("started_at", "VARCHAR"),
    ("started_ts", "DOUBLE"), ("day", "VARCHAR"), ("workload", "VARCHAR"), ("domain", "VARCHAR"),
    ("workload_version", "INTEGER"), ("spec_hash", "VARCHAR"), ("backend", "VARCHAR"), ("hardware", "VARCHAR"),
    ("precision", "VARCHAR"), ("git_sha", "VARCHAR"), ("git_dirty", "BOOLEAN"), ("seed", "BIGINT"),
    ("status", "VARCHAR"), ("tta_s", "DOUBLE"), ("train_s", "DOUBLE"), ("total_s", "DOUBLE"), ("steps", "BIGINT"),
    ("steps_to_target", "BIGINT"), ("time_per_step_s", "DOUBLE"), ("samples_per_s", "DOUBLE"), ("mfu", "DOUBLE"),
    ("peak_memory_bytes", "DOUBLE"), ("energy_j", "DOUBLE"), ("noise_floor", "DOUBLE"), ("target_metric", "VARCHAR"),
    ("target_value", "DOUBLE"), ("host_load", "VARCHAR"), ("result", "VARCHAR"), ("comparison", "VARCHAR"),
    # what the site's leaderboards and workload pages show besides the figures above (index schema 3)
    ("energy_to_target_j", "DOUBLE"), ("backend_version", "VARCHAR"), ("device_name", "VARCHAR"),
    ("device_count", "BIGINT"), ("algorithm", "VARCHAR"), ("description", "VARCHAR"), ("target", "VARCHAR"),
    ("mllog", "VARCHAR"),
    ("paused", "VARCHAR"),  # a pause inside the timed run (suite/measure/pauses.py), index schema 4
    ("rollout_s_per_step", "DOUBLE"), ("training_s_per_step", "DOUBLE"),  # RL post-training phases, schema 5
    ("imported", "VARCHAR"),  # a published (MLPerf) result's provenance as JSON, NULL for a local run: schema 6
    ("synthetic_data", "BOOLEAN"),  # read `data prepare --synthetic` files: off the leaderboards, schema 6
    ("variant", "VARCHAR"),  # the spec's named variant (`--variant tiny`): labelled, off the leaderboards, schema 6
    ("goodput", "VARCHAR"),  # the wall-clock account: {"parts_s": ..., "goodput": ...} (JSON), index schema 6;
    # schema 7: also "recovery" (restarts, steps lost, times to recover) and the spec's "faults" block (_account)
    ("figures", "VARCHAR"),  # the run's stats.RunFigures (figures_of) as JSON, what compare and promote read: schema 8
)
SERIES_COLUMNS: tuple[tuple[str, str], ...] = (
    ("path", "VARCHAR"), ("step", "BIGINT"), ("samples", "BIGINT"), ("elapsed_s", "DOUBLE"), ("train_s", "DOUBLE"),
    ("metric", "VARCHAR"), ("value", "DOUBLE"), ("i", "BIGINT"),  # i: the point's place in the eval curve
)
RUN_NAMES = tuple(c for c, _ in RUN_COLUMNS)
_TARGETS: dict[str, dict[str, Any]] = {}


def target_of(column: str | None) -> dict[str, Any]:
    """The spec's target of a run, from its `target` column: a few distinct targets among many runs, each
    parsed once (the dict is shared: read it, never change it)."""
    if not column:
        return {}
    target = _TARGETS.get(column)
    if target is None:
        target = _TARGETS[column] = json.loads(column)
    return target


_ACCOUNTS: dict[str, dict[str, Any]] = {}


def goodput_of(column: str | None) -> dict[str, Any]:
    """A run's `goodput` column (_account) as a dict, {} for a run without an account; each distinct text parsed
    once (the dict is shared: read it, never change it)."""
    if not column:
        return {}
    got = _ACCOUNTS.get(column)
    if got is None:
        try:
            parsed = json.loads(column)
        except ValueError:
            parsed = {}
        got = _ACCOUNTS[column] = parsed if isinstance(parsed, dict) else {}
    return got


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default if value is None else str(value)


def _account(r: results_mod.Result, spec: dict[str, Any]) -> str | None:
    """The `goodput` column: the account's parts and goodput, what its recoveries cost and the faults the spec
    injected (the site's goodput history and fault-scenario column, suite/site/goodput_history.py)."""
    if r.goodput is None:
        return None
    rec = r.goodput.recovery
    faults = spec.get("faults")
    return json.dumps({"parts_s": r.goodput.parts_s, "goodput": r.goodput.goodput,
                       "recovery": {k: rec[k] for k in ("restarts", "steps_lost", "time_to_recover_s") if k in rec},
                       "faults": {k: v for k, v in faults.items() if v is not None} if isinstance(faults, dict) else None})


def row_of(rel: str, source: str, r: results_mod.Result, with_json: bool = True) -> tuple[list[Any], list[list[Any]]]:
    """The `runs` row (in RUN_COLUMNS order) and the `series` rows of one validated result. `with_json`
    False leaves the `result` column None (the site's file walk holds the Result itself)."""
    from suite.results import key as compare_key
    from suite.results.runfiles import _noise_floor_of  # the figures compare uses, computed once
    from suite.results.stats import figures_of

    raw_spec = r.config.get("spec")
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    raw_target = spec.get("target")
    target: dict[str, Any] = raw_target if isinstance(raw_target, dict) else {}
    raw_domain = spec.get("domain")
    domain = raw_domain if isinstance(raw_domain, str) and raw_domain else (
        r.workload.partition("/")[0] if "/" in r.workload else "other")
    algo = r.config.get("algorithm")
    f = figures_of(r)  # the one builder of a run's figures: the columns below are its fields
    ts = r.started_at.timestamp()
    run = [
        rel, source, r.run_id, r.started_at.isoformat(), ts, time.strftime("%Y-%m-%d", time.gmtime(ts)),
        r.workload, domain, r.workload_version, r.spec_hash, r.backend, r.hardware.slug,
        _text(r.config.get("precision"), "fp32"), r.git.sha, bool(r.git.dirty), r.seed, r.status,
        r.time_to_target_s, r.train_s, r.total_s, r.steps, r.steps_to_target, f.time_per_step_s, f.samples_per_s,
        r.mfu, f.peak_memory_bytes, r.energy_j, _noise_floor_of(r.config),
        target.get("metric") if isinstance(target.get("metric"), str) else None, _num(target.get("value")),
        f.host_load, r.model_dump_json() if with_json else None,
        json.dumps(compare_key.key_of(r.config, backend=r.backend, world_size=r.world_size, parallel=r.parallel,
                                      mode=r.mode)),
        r.energy_to_target_j, _text(r.backend_version), r.hardware.device_name, r.hardware.device_count,
        str(algo.get("label", "")) if isinstance(algo, dict) else "", _text(spec.get("description")),
        json.dumps(target), r.mllog, f.paused, f.rollout_s_per_step, f.training_s_per_step,
        r.imported.model_dump_json() if r.imported else None,
        bool(r.synthetic_data), _text(r.config.get("variant")),
        _account(r, spec),
        json.dumps(dict(f)) if with_json else None,  # json, not pydantic: an inf stays inf (pydantic writes null)
    ]
    series = [[rel, p.step, p.samples, p.elapsed_s, p.train_s, m, v, i]
              for i, p in enumerate(r.eval_curve) for m, v in p.metrics.items()]
    return run, series
