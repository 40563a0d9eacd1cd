"""One MLPerf `result_N.txt` read: MLCommons' own parser and compliance checker, and what TrainBench keeps of it.

`read_log` is the unit of work the importer spreads over processes. It reads the file once, hashes it, parses it
with `mlperf_logging`'s parser for the round's ruleset, and runs the compliance checker on the parsed lines
exactly as `ComplianceChecker.check_file` does (the same two steps, without parsing the file a second time). The
checker re-reads its YAML rule files for every log; `_cached_rules` keeps them per process, which is most of
the checker's time and changes none of its verdicts.

Two verdicts come out, kept apart on purpose:
- `score_valid`: the result summarizer's own test (compliant, parsed, run_start and run_stop present). The score
  (suite/mlperf/score.py) uses only this, so it is MLPerf's whatever TrainBench thinks of the file.
- `bad`: why TrainBench will not import the file as a result (too large, not UTF-8, a line that is not MLLOG
  JSON, no run_start/run_stop, ...). A bad file is named and skipped; it still counts in the score as the
  summarizer counts it (a dropped run).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_LOG_BYTES = 512 * 1024 * 1024  # the largest published v5.1 log is ~4 MB; a 2 GB "log" is not one
TOKEN = ":::MLLOG "
# keys that are events, not settings: everything else logged once is kept as a hyperparameter
_EVENTS = {"run_start", "run_stop", "init_start", "init_stop", "epoch_start", "epoch_stop", "block_start",
           "block_stop", "eval_start", "eval_stop", "eval_accuracy", "eval_error", "cache_clear", "train_loss",
           "tracked_stats", "throughput", "samples_count"}


@dataclass
class EvalRecord:
    time_ms: float
    samples: int | None
    epoch: float | None
    value: float
    key: str


@dataclass
class LogInfo:
    path: str
    sha256: str = ""
    size: int = 0
    bad: str | None = None  # why the file is not imported (named and skipped); None: importable
    score_valid: bool = False  # the summarizer's test: compliant, parsed, run_start and run_stop present
    compliant: bool = False
    compliance_reason: str | None = None
    run_start_ms: float | None = None
    run_stop_ms: float | None = None
    run_stop_status: str | None = None
    benchmark: str | None = None
    division: str | None = None
    org: str | None = None
    platform: str | None = None
    global_batch_size: float | None = None
    samples_to_converge: float | None = None
    evals: list[EvalRecord] = field(default_factory=list)
    hyperparameters: dict[str, Any] = field(default_factory=dict)

    @property
    def time_to_train_ms(self) -> float | None:
        if self.run_start_ms is None or self.run_stop_ms is None:
            return None
        return self.run_stop_ms - self.run_start_ms

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LogInfo:
        data = dict(data)
        data["evals"] = [EvalRecord(**e) for e in data.get("evals", [])]
        return cls(**data)


_RULES: dict[str, Any] = {}


class _CachedYaml:
    """Stands in for the `yaml` module inside mlp_compliance: the same loader, each rule file loaded once."""

    def __init__(self, yaml_module: Any):
        self._yaml = yaml_module
        self.BaseLoader = yaml_module.BaseLoader

    def load(self, stream: Any, Loader: Any) -> Any:  # noqa: N803 - yaml's own argument name
        key = (getattr(stream, "name", None), Loader)
        if key[0] is None:
            return self._yaml.load(stream, Loader=Loader)
        if key not in _RULES:
            _RULES[key] = self._yaml.load(stream, Loader=Loader)
        return _RULES[key]


def _cached_rules() -> Any:
    from mlperf_logging.compliance_checker import mlp_compliance

    if not isinstance(mlp_compliance.yaml, _CachedYaml):
        mlp_compliance.yaml = _CachedYaml(mlp_compliance.yaml)
    return mlp_compliance


def hash_file(path: str) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def read_log(path: str, ruleset: str) -> LogInfo:
    """Everything TrainBench keeps of one log; never raises for a bad file (the reason is in `bad`)."""
    info = LogInfo(path=path)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            info.bad = "not a regular file"
            return info
        if st.st_size > MAX_LOG_BYTES:
            info.size = st.st_size
            info.bad = f"{st.st_size} bytes is larger than any MLPerf log ({MAX_LOG_BYTES}); not read"
            return info
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        info.bad = f"cannot read: {e.strerror or e}"
        return info
    info.sha256, info.size = hashlib.sha256(raw).hexdigest(), len(raw)
    text = raw.decode("latin-1")  # as mlperf_logging's parser reads it: every byte is a character
    _check(info, text.splitlines(keepends=True), ruleset)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        info.bad = info.bad or f"line {line}: not UTF-8 text (byte {raw[e.start]:#04x} at offset {e.start})"
    return info


def _check(info: LogInfo, lines: list[str], ruleset: str) -> None:
    mlp_compliance = _cached_rules()
    from mlperf_logging.compliance_checker import mlp_parser

    parser = getattr(mlp_parser, f"parse_file_{ruleset.replace('.', '')}", None)
    if parser is None:
        info.bad = f"ruleset {ruleset}: mlperf_logging has no parser for it"
        return
    loglines, errors = _parse_lines(ruleset, lines)
    # ComplianceChecker.check_file, step for step, on the lines already parsed
    checker = mlp_compliance.make_checker(usage="training", ruleset=ruleset, quiet=True, werror=False)
    if errors:
        checker.put_message("Log lines had parsing errors.")
    try:
        checker.check_loglines(loglines, f"training_{ruleset}/common.yaml")
    except Exception as e:  # noqa: BLE001 - the checker's own crash on odd input is a failed check, named
        checker.put_message(f"compliance checker crashed: {type(e).__name__}: {e}")
    finally:
        mlp_compliance.enqueued_configs.clear()
    info.compliant = not checker.has_messages()
    if not info.compliant:
        messages = [*checker.overwritable.values(), *checker.not_overwritable]
        info.compliance_reason = "; ".join(m.split("\ncurrent context")[0].replace("\n", " ") for m in messages)[:4000]
    _fields(info, loglines)
    parsed_ok = not errors
    has_clock = info.run_start_ms is not None and info.run_stop_ms is not None
    info.score_valid = info.compliant and parsed_ok and has_clock
    if errors:
        line, why = errors[0]
        info.bad = f"a line that is not MLLOG JSON ({len(errors)} in all; first: {line.strip()[:120]!r}: {why})"
    elif info.run_start_ms is None:
        info.bad = "no run_start: not a complete MLPerf log"
    elif info.run_stop_ms is None:
        info.bad = "no run_stop: the log ends before the run did (truncated or killed)"


def _parse_lines(ruleset: str, lines: list[str]) -> tuple[list[Any], list[Any]]:
    import importlib

    module = importlib.import_module(f"mlperf_logging.compliance_checker.mlp_parser.ruleset_{ruleset.replace('.', '')}")
    return module.parse_generator(lines)


def _fields(info: LogInfo, loglines: list[Any]) -> None:
    # run_start/run_stop as the summarizer's _query_run_start_stop picks them
    for ll in loglines:
        if ll.key == "run_start":
            info.run_start_ms = float(ll.timestamp)
        if ll.key == "run_stop":
            info.run_stop_ms = float(ll.timestamp)
            meta = ll.value.get("metadata") or {}
            info.run_stop_status = meta.get("status") if isinstance(meta, dict) else None
        if info.run_start_ms is not None and info.run_stop_ms is not None:
            break
    seen_stop = False
    for ll in loglines:
        value = ll.value.get("value")
        meta = ll.value.get("metadata") if isinstance(ll.value.get("metadata"), dict) else {}
        if ll.key == "submission_benchmark":
            info.benchmark = str(value)
        elif ll.key == "submission_division":
            info.division = str(value)
        elif ll.key == "submission_org":
            info.org = str(value)
        elif ll.key == "submission_platform":
            info.platform = str(value)
        elif ll.key == "global_batch_size" and isinstance(value, int | float):
            info.global_batch_size = float(value)
        elif ll.key in ("eval_accuracy", "eval_error") and not seen_stop and _number(value):
            samples, epoch = meta.get("samples_count"), meta.get("epoch_num")
            info.evals.append(EvalRecord(float(ll.timestamp), int(samples) if _number(samples) else None,
                                         float(epoch) if _number(epoch) else None, float(value), ll.key))
        elif ll.key == "run_stop":
            seen_stop = True
        elif ll.key not in _EVENTS and ll.key not in info.hyperparameters and _scalar(value):
            info.hyperparameters[ll.key] = value
    if info.run_stop_status == "success" and info.evals:  # as rcp_checker reads samples to converge
        last = info.evals[-1]
        info.samples_to_converge = float(last.samples) if last.samples is not None else last.epoch


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool) and (not isinstance(v, str) or len(v) < 300)


def dumps(info: LogInfo) -> str:
    return json.dumps(info.to_json())
