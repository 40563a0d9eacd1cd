"""Local runs of MLPerf-named workloads out as a submission-shaped folder, for `mlperf_logging.package_checker`.

`<out>/<submitter>/results/<system>/<benchmark>/result_N.txt` are the runs' own :::MLLOG logs (the side-car each
result names), one per run, oldest first; `<out>/<submitter>/systems/<system>.json` is the system description:
what the fingerprint knows (accelerator, counts, host CPU, memory, framework), the fields only a person can give
(`REQUIRED_FROM_PERSON`, from a JSON file; named in the error when missing), and "" for the rest, as published
descriptions leave an unknown. Each log is then checked with the official compliance checker of the ruleset
(suite.measure.mllog.check_benchmark): a log that breaks a rule is written all the same and named with the keys
that failed, so a person sees why the package checker will refuse it. Imported (published) results are never
exported.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.mlperf.tree import SYSTEM_FIELDS
from suite.results.record import Result, load_results, mllog_path, slug

REQUIRED_FROM_PERSON = ("submitter", "division", "status")
AVAILABILITY = ("Available on-premise", "Available cloud", "Research, Development, or Internal (RDI)", "Preview")
# every field system_desc_checker requires (mlperf-logging 4.1.68), in its order
SYSTEM_DESC_FIELDS = (
    "submitter", "division", "status", "system_name", "number_of_nodes", "host_processors_per_node",
    "host_processor_model_name", "host_processor_core_count", "host_processor_vcpu_count", "host_processor_frequency",
    "host_processor_caches", "host_processor_interconnect", "host_memory_capacity", "host_storage_type",
    "host_storage_capacity", "host_networking", "host_networking_topology", "host_memory_configuration",
    "accelerators_per_node", "accelerator_model_name", "accelerator_host_interconnect", "accelerator_frequency",
    "accelerator_on-chip_memories", "accelerator_memory_configuration", "accelerator_memory_capacity",
    "accelerator_interconnect", "accelerator_interconnect_topology", "cooling", "hw_notes", "framework",
    "other_software_stack", "operating_system", "sw_notes")
_KEY = re.compile(r"CHECK for '([^']+)' failed|occurrence of '([^']+)'|Failed checks for (\w+)")


class ExportError(ValueError):
    """Input the export cannot take; `str()` names the file, flag or field."""


@dataclass
class Exported:
    out: Path
    logs: list[Path] = field(default_factory=list)
    systems: list[Path] = field(default_factory=list)
    failed: dict[str, list[str]] = field(default_factory=dict)  # log -> keys whose rule it breaks
    messages: dict[str, list[str]] = field(default_factory=dict)


def read_person_fields(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ExportError(f"--system-fields {path}: not a JSON object ({e})") from None
    if not isinstance(data, dict):
        raise ExportError(f"--system-fields {path}: not a JSON object")
    missing = [k for k in REQUIRED_FROM_PERSON if not str(data.get(k, "")).strip()]
    if missing:
        raise ExportError(f"--system-fields {path}: missing {', '.join(missing)} (only a person can say these: "
                          f"submitter, division closed|open, status one of {', '.join(AVAILABILITY)})")
    if data["division"] not in ("closed", "open"):
        raise ExportError(f"--system-fields {path}: division {data['division']!r}: expected closed or open")
    if data["status"] not in AVAILABILITY:
        raise ExportError(f"--system-fields {path}: status {data['status']!r}: expected one of {', '.join(AVAILABILITY)}")
    unknown = sorted(set(data) - set(SYSTEM_DESC_FIELDS) - set(SYSTEM_FIELDS))
    if unknown:
        raise ExportError(f"--system-fields {path}: unknown field(s) {', '.join(unknown)}")
    return data


def system_desc(r: Result, person: dict[str, Any], system: str) -> dict[str, Any]:
    hw = r.hardware
    nodes = max(1, hw.node_count)
    desc: dict[str, Any] = dict.fromkeys(SYSTEM_DESC_FIELDS, "")
    desc.update({
        "system_name": system, "number_of_nodes": str(nodes), "host_processors_per_node": "1",
        "host_processor_model_name": hw.cpu_model, "host_processor_core_count": str(hw.cpu_cores),
        "host_memory_capacity": f"{hw.memory_bytes / 2**30:.0f} GB" if hw.memory_bytes else "",
        "accelerators_per_node": str(max(1, hw.device_count // nodes)) if hw.device_type != "cpu" else "0",
        "accelerator_model_name": hw.device_name if hw.device_type != "cpu" else "",
        "accelerator_interconnect": hw.interconnect or "",
        "framework": f"PyTorch {r.software.get('torch') or ''}".strip(),
        "other_software_stack": f"TrainBench backend {r.backend} {r.backend_version or ''}".strip(),
        "system_type": "datacenter",
    })
    desc.update(person)
    return desc


def export(results: Path, out: Path, person: dict[str, Any], workload: str | None = None,
           ruleset: str = "6.1.0") -> Exported:
    from suite.measure.mllog import check_benchmark

    loaded = load_results(results)
    runs: dict[tuple[str, str], list[tuple[Path, Result]]] = {}
    for path, r in loaded.results:
        if r.imported is not None or r.mode != "tta" or (workload and r.workload != workload):
            continue
        bench = (r.config.get("spec") or {}).get("mlperf_benchmark") if isinstance(r.config.get("spec"), dict) else None
        if not bench or not r.mllog or not mllog_path(path).is_file():
            continue
        runs.setdefault((str(bench), r.hardware.slug), []).append((path, r))
    if not runs:
        raise ExportError(f"--results {results}: no run of an MLPerf-named workload (a spec with mlperf_benchmark) "
                          "with its MLLOG log" + (f" for --workload {workload}" if workload else ""))
    report = Exported(out)
    submitter = slug(str(person["submitter"]))
    for (bench, hardware), items in sorted(runs.items()):
        items.sort(key=lambda pr: pr[1].started_at)
        system = str(person.get("system_name") or hardware)
        folder = out / submitter / "results" / slug(system) / bench
        if folder.exists():
            raise ExportError(f"--out {out}: {folder} exists; export into a new folder (nothing is overwritten)")
        folder.mkdir(parents=True)
        for n, (path, _) in enumerate(items):
            dest = folder / f"result_{n}.txt"
            shutil.copyfile(mllog_path(path), dest)
            report.logs.append(dest)
            ok, messages = check_benchmark(dest, ruleset)
            if not ok:
                report.messages[str(dest)] = messages
                report.failed[str(dest)] = failed_keys(messages)
        sys_file = out / submitter / "systems" / f"{slug(system)}.json"
        sys_file.parent.mkdir(parents=True, exist_ok=True)
        sys_file.write_text(json.dumps(system_desc(items[-1][1], person, system), indent=4) + "\n", encoding="utf-8")
        report.systems.append(sys_file)
    return report


def failed_keys(messages: list[str]) -> list[str]:
    keys = []
    for m in messages:
        for g in _KEY.findall(m):
            k = next(x for x in g if x)
            if k not in keys:
                keys.append(k)
    return keys or ["(see the checker's messages)"]
