"""Published MLPerf logs in as TrainBench results: one imported `Result` per `result_N.txt`, provenance attached.

Each result is written through suite.results' append-only writer, at a path fixed by the log (its run_start and
hash), so importing the same folder twice writes nothing the second time and never touches what is recorded.
A log TrainBench cannot take (see suite/mlperf/logs.py, tree.py) is named and skipped; its run still counts in
MLPerf's score of its system, as the result summarizer counts it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from suite.mlperf import scan, score, tree
from suite.mlperf.logs import LogInfo
from suite.results.record import (
    EvalPoint,
    GitInfo,
    HardwareInfo,
    ImportedFrom,
    Result,
    ResultWriteError,
    result_path,
    slug,
    write_atomic,
)

# MLPerf benchmark -> the TrainBench workload that runs it; any other benchmark is imported as mlperf/<name>
WORKLOADS = {"llama31_8b": "nlp/llama31_8b", "llama2_70b_lora": "nlp/llama2_70b_lora", "flux1": "cv/flux1",
             "gpt_oss_20b": "nlp/gpt_oss_20b", "deepseekv3_671b": "nlp/deepseekv3_671b", "dlrmv4": "rec/dlrmv4",
             "dlrm_dcnv2": "rec/dlrm_dcnv2", "qwen35_397b_grpo": "rl/qwen35_397b_grpo"}
BACKEND = "mlperf"
_INDEX = re.compile(r"result_(\d+)\.txt$")


def workload_of(benchmark: str) -> str:
    return WORKLOADS.get(benchmark, f"mlperf/{benchmark}")


_TARGETS: dict[str, dict | None] = {}


def target_of(benchmark: str) -> dict | None:
    """The TrainBench workload's target (its spec's `target`, which cites MLPerf's eval_accuracy threshold for the
    same quantity), or None for a benchmark TrainBench does not run."""
    if benchmark not in _TARGETS:
        _TARGETS[benchmark] = None
        if benchmark in WORKLOADS:
            try:
                from suite import registry
                from suite.specload import load_spec

                _TARGETS[benchmark] = load_spec(registry.find_workload(WORKLOADS[benchmark])).target.model_dump(
                    mode="json")
            except Exception:  # noqa: BLE001 - no target only means no target line and no second curve name
                _TARGETS[benchmark] = None
    return _TARGETS[benchmark]


@dataclass
class ImportReport:
    imported: list[Path] = field(default_factory=list)
    already: int = 0
    skipped: list[str] = field(default_factory=list)  # "path: why", one per file not imported
    rows: list[score.Row] = field(default_factory=list)
    logs: int = 0


def known_benchmarks(ruleset: str) -> set[str]:
    from mlperf_logging.benchmark_meta import get_allowed_benchmarks

    return set(get_allowed_benchmarks("training", ruleset))


def import_tree(src: Path, results: Path, ruleset: str, workers: int | None = None,
                progress: Callable[[int, int], None] | None = None) -> ImportReport:
    """Import every log under src (a submitter folder or a results repository) into the results folder."""
    report = ImportReport()
    walk = tree.walk(src, known_benchmarks(ruleset))
    report.skipped += [str(b) for b in walk.bad]
    logs = [log for b in walk.benchmarks for log in b.logs]
    report.logs = len(logs) + sum(1 for b in walk.bad if b.path.endswith(".txt"))
    cache = scan.Cache(results / scan.CACHE_NAME, ruleset)
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, len(logs))

    infos = scan.read_all(logs, ruleset, cache, workers=workers, progress=tick)
    report.rows = score.summarize(walk, infos)
    scores = {(r.submitter_dir, r.system_file, b): s for r in report.rows for b, s in r.scores.items()}
    for bench in walk.benchmarks:
        entry = score.system_of(walk, bench)
        for log in bench.logs:
            info = infos[log]
            if entry is None or entry.desc is None:
                report.skipped.append(f"{log}: its system description {entry.path if entry else '?'} is "
                                      f"{entry.error if entry else 'missing'}")
                continue
            if info.bad:
                report.skipped.append(f"{log}: {info.bad}")
                continue
            if info.benchmark is not None and info.benchmark != bench.benchmark:
                report.skipped.append(f"{log}: logs submission_benchmark {info.benchmark!r} but lies under "
                                      f"{bench.benchmark}/")
                continue
            known = cache.imported.get(info.sha256)
            if known and (results / known).is_file():  # imported before: nothing to build, nothing to write
                report.already += 1
                continue
            result = to_result(info, bench, entry.desc, scores[(bench.submitter_dir, bench.system, bench.benchmark)],
                               ruleset)
            path = result_path(results, result)
            if path.exists():
                report.already += 1
                cache.note_imported(info.sha256, str(path.relative_to(results)))
                continue
            try:
                write_atomic(path, result.model_dump_json(indent=1))
            except FileExistsError:
                report.already += 1
                continue
            except OSError as e:
                raise ResultWriteError(path, e.strerror or str(e)) from e
            report.imported.append(path)
            cache.note_imported(info.sha256, str(path.relative_to(results)))
    try:
        cache.save()
    except OSError:
        pass  # a cache that cannot be saved costs time next run, nothing else
    return report


def _precision(desc: dict, info: LogInfo) -> str:
    notes = f"{desc.get('sw_notes', '')} {info.hyperparameters.get('precision', '')}".lower()
    for name in ("fp4", "fp8", "bf16", "fp16", "fp32"):
        if name in notes:
            return name
    return "unknown"


def to_result(info: LogInfo, bench: tree.BenchmarkDir, desc: dict, system_score: score.Score, ruleset: str) -> Result:
    assert info.run_start_ms is not None and info.run_stop_ms is not None
    start = datetime.fromtimestamp(info.run_start_ms / 1000, UTC)
    ttt_s = (info.run_stop_ms - info.run_start_ms) / 1000
    reached = info.run_stop_status == "success"
    cols = score.system_columns(desc)
    nodes, count = int(desc["number_of_nodes"]), cols["accelerators_count"]
    accel = str(desc["accelerator_model_name"])
    m = _INDEX.search(bench.logs[bench.logs.index(info.path)])
    target = target_of(bench.benchmark)
    # the workload's target metric is MLPerf's eval_accuracy of this benchmark (its spec's provenance says so): the
    # value is recorded under both names, so the curve lies beside local runs' curves of the same quantity
    alias = target.get("metric") if target else None
    curve = [EvalPoint(step=i, samples=e.samples or 0, elapsed_s=(e.time_ms - info.run_start_ms) / 1000,
                       train_s=(e.time_ms - info.run_start_ms) / 1000,
                       metrics={e.key: e.value, **({alias: e.value} if alias and e.key == "eval_accuracy" else {})})
             for i, e in enumerate(info.evals)]
    samples = (info.evals[-1].samples or 0) if info.evals else 0  # MLPerf counts samples at evaluations only
    rnd = ruleset.rsplit(".", 1)[0]
    imported = ImportedFrom(
        round=rnd, ruleset=ruleset, division=str(desc["division"]), availability=str(desc["status"]),
        submitter=str(desc["submitter"]), system=bench.system, system_name=cols["system"], benchmark=bench.benchmark,
        framework=cols["framework"], log_path=str(Path(info.path).resolve()), log_sha256=info.sha256,
        result_index=int(m.group(1)) if m else 0, run_stop_status=info.run_stop_status, compliant=info.compliant,
        compliance_reason=info.compliance_reason, global_batch_size=info.global_batch_size,
        score_min=None if system_score.minutes == float("inf") else system_score.minutes,
        score_runs=system_score.runs, score_dropped=system_score.dropped,
        rcp_scaling_factor=system_score.scaling_factor)
    warnings = [] if info.compliant else [f"not compliant (the MLPerf checker): {info.compliance_reason}"]
    return Result(
        run_id=info.sha256[:8], started_at=start, workload=workload_of(bench.benchmark), workload_version=0,
        spec_hash=f"mlperf-{rnd}-{bench.benchmark}", backend=BACKEND, backend_version=None, tier="published",
        config={"spec": {"target": target} if target else {},
                "precision": _precision(desc, info), "global_batch_size": info.global_batch_size,
                "hyperparameters": info.hyperparameters, "mlperf_benchmark": bench.benchmark},
        parallel={"dp": count}, status="reached" if reached else "budget",
        time_to_target_s=ttt_s if reached else None, train_s=ttt_s, eval_s=0.0, init_s=0.0, total_s=ttt_s,
        steps=0, samples=samples, samples_to_target=samples if reached and samples else None,
        final_metrics={info.evals[-1].key: info.evals[-1].value} if info.evals else {},
        eval_curve=curve,
        hardware=HardwareInfo(
            slug=re.sub(r"-{2,}", "-", slug(f"{accel}-x{count}")), device_type="accelerator", device_name=accel, device_count=count,
            cpu_model=str(desc["host_processor_model_name"]),
            cpu_cores=_int(desc.get("host_processor_core_count")) * cols["host_processors_count"],
            node_count=nodes, interconnect=str(desc.get("accelerator_interconnect") or "") or None),
        software={"framework": cols["framework"]}, git=GitInfo(), seed=imported.result_index, world_size=count,
        warnings=warnings, imported=imported,
    )


def _int(v: object) -> int:
    try:
        return int(str(v).strip())
    except ValueError:
        return 0
