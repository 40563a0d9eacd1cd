"""An MLPerf-style `:::MLLOG` log of one run, written with mlperf-logging's `mllog` beside the result file.

Events are logged as they happen (their time_ms is real) into memory, and the file is written atomically
next to the result when the run is recorded, so a killed run leaves neither a half result nor a half log.
Order: init_start, submission/hyper-parameter events, init_stop, run_start, then per evaluation interval
block_start .. block_stop, eval_start, eval_accuracy, eval_stop, and run_stop with status success|aborted.
Trainbench's own status (reached, budget, diverged, ...) is in run_stop's metadata.

Every key MLPerf Training 6.1's common rules require is logged (submission org/division/platform, cache_clear,
train/eval samples, lowest numerical precision per op class, tensor/pipeline/context/expert parallelism,
micro_batch_size, config_filename). Timestamps come from one wall-clock anchor plus a monotonic counter, so
they never go backwards (an NTP step cannot reorder them), and run_stop closes the last block at its own time.
`check_common` runs the official checker's common rules over a log (see its docstring for why only those).
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from pathlib import Path
from typing import Any

from mlperf_logging.mllog import constants as C
from mlperf_logging.mllog.mllog import MLLogger

from suite.results.record import write_atomic
from suite.spec import MLPERF_INIT_LIMIT_S

PREFIX = ":::MLLOG "
_ids = itertools.count()


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class MLLogRecorder:
    """One run's MLLOG events. Each run gets its own logger, so seeds run in one process never mix."""

    def __init__(self, benchmark: str):
        self.handler = _ListHandler()
        logger = logging.getLogger(f"trainbench.mllog.{next(_ids)}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        logger.addHandler(self.handler)
        self._logger = logger
        self.log = MLLogger(logger=logger, default_stack_offset=3)
        self.benchmark = benchmark
        self.block_open = False
        self.block_start_samples = 0
        self._anchor_ms = time.time() * 1e3 - time.perf_counter() * 1e3

    def now_ms(self) -> int:
        """Wall-clock milliseconds that never go backwards (wall anchor + monotonic counter)."""
        return int(self._anchor_ms + time.perf_counter() * 1e3)

    @property
    def lines(self) -> list[str]:
        return self.handler.lines

    def init_start(self) -> None:
        self.log.start(key=C.INIT_START, time_ms=self.now_ms())
        self.log.event(key=C.SUBMISSION_BENCHMARK, value=self.benchmark, time_ms=self.now_ms())

    def event(self, key: str, value: Any, metadata: dict[str, Any] | None = None) -> None:
        self.log.event(key=key, value=value, metadata=metadata, time_ms=self.now_ms())

    def hyperparameters(self, seed: int, global_batch_size: int, optimizer: str, learning_rate: float | None,
                        platform: str, extra: dict[str, Any] | None = None) -> None:
        self.event(C.SUBMISSION_PLATFORM, platform)
        self.event(C.SEED, seed)
        self.event(C.GLOBAL_BATCH_SIZE, global_batch_size)
        self.event(C.OPT_NAME, optimizer)
        if learning_rate is not None:
            self.event(C.OPT_BASE_LR, learning_rate)
        for key, value in (extra or {}).items():
            self.event(key, value)

    def submission(self, *, org: str, division: str, train_samples: int | None, eval_samples: int | None,
                   precision_by_class: dict[str, str], comm_precision: str, layout: dict[str, Any],
                   micro_batch_size: int, gradient_accumulation_steps: int, config_filename: str,
                   cache_clear: bool, staging_s: float | None) -> None:
        """The submission metadata and the run-configuration keys MLPerf Training 6.1 requires."""
        self.event(C.SUBMISSION_ORG, org)
        self.event(C.SUBMISSION_DIVISION, division)
        # no cache is cleared; the data set was staged (read, normalised, moved to the device) during init,
        # before run_start: declared here with its time, as MLPerf asks of staging outside the clock
        self.event(C.CACHE_CLEAR, cache_clear, {"data_staging_s": staging_s, "data_on_clock": False})
        self.event(C.TRAIN_SAMPLES, train_samples)
        self.event(C.EVAL_SAMPLES, eval_samples)
        for op_class, key in (("matmul", "linear"), ("attention", "attn")):
            self.event(f"lowest_numerical_precision_in_{key}", precision_by_class[op_class])
        self.event("lowest_numerical_precision_in_comm", comm_precision)
        for name, short in (("tensor", "tp"), ("pipeline", "pp"), ("context", "cp"), ("expert", "ep")):
            self.event(f"{name}_parallelism", int(layout.get(short) or 1))
        self.event("micro_batch_size", micro_batch_size)
        self.event(C.GRADIENT_ACCUMULATION_STEPS, gradient_accumulation_steps)
        self.event("config_filename", config_filename)

    def init_stop(self) -> None:
        self.log.end(key=C.INIT_STOP, time_ms=self.now_ms())

    def run_start(self) -> None:
        self.log.start(key=C.RUN_START, time_ms=self.now_ms())
        self.block_start(0, 0)

    def block_start(self, step: int, samples: int) -> None:
        self.log.start(key=C.BLOCK_START, time_ms=self.now_ms(),
                       metadata={"first_step_num": step, C.SAMPLES_COUNT: samples})
        self.block_open, self.block_start_samples = True, samples

    def block_stop(self, step: int, samples: int, time_ms: int | None = None) -> None:
        if self.block_open:
            self.log.end(key=C.BLOCK_STOP, time_ms=self.now_ms() if time_ms is None else time_ms,
                         metadata={"step_num": step, C.SAMPLES_COUNT: samples,
                                   "block_samples": samples - self.block_start_samples})
            self.block_open = False

    def eval_start(self, step: int, samples: int) -> None:
        self.block_stop(step, samples)
        self.log.start(key=C.EVAL_START, time_ms=self.now_ms(), metadata={"step_num": step, C.SAMPLES_COUNT: samples})

    def eval_stop(self, step: int, samples: int, target_metric: str, scores: dict[str, float],
                  running: bool) -> None:
        value = scores.get(target_metric)
        self.log.event(key=C.EVAL_ACCURACY, value=None if value is None else float(value), time_ms=self.now_ms(),
                       metadata={"step_num": step, C.SAMPLES_COUNT: samples, "metric": target_metric,
                                 "all": {k: float(v) for k, v in scores.items()}})
        self.log.end(key=C.EVAL_STOP, time_ms=self.now_ms(), metadata={"step_num": step, C.SAMPLES_COUNT: samples})
        if running:  # the next training interval starts now, unless this evaluation ended the run
            self.block_start(step, samples)

    def run_stop(self, status: str, step: int, samples: int, time_ms: int | None = None) -> None:
        """run_stop at `time_ms` (when the clock stopped); the open block closes at the same instant, never after."""
        time_ms = self.now_ms() if time_ms is None else time_ms
        self.block_stop(step, samples, time_ms=time_ms)
        self.log.end(key=C.RUN_STOP, time_ms=time_ms,
                     metadata={C.STATUS: C.SUCCESS if status == "reached" else C.ABORTED,
                               "trainbench_status": status, "step_num": step, C.SAMPLES_COUNT: samples})

    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)

    def write(self, path: Path) -> Path:
        self._logger.removeHandler(self.handler)
        return write_atomic(path, self.text())


def clock_record(init_s: float, staging_s: float | None, division: str,
                 window: tuple[float, str] | None = None) -> dict[str, Any]:
    """What the result says about MLPerf's clock rules: the data staging (declared, off the clock) and init;
    `window` is the watchdog's init limit and its source (WorkloadSpec.init_limit), recorded beside MLPerf's."""
    limit = MLPERF_INIT_LIMIT_S.get(division, MLPERF_INIT_LIMIT_S["closed"])
    return {
        "init_window_s": window[0] if window else None, "init_window_source": window[1] if window else None,
        "data_staging_s": staging_s, "data_on_clock": False, "cache_clear": False,
        "data_staging": "declared: the workload's data set is read, normalised and moved to the device during "
                        "init, before run_start, once per run (seed); the MLLOG's cache_clear carries the time",
        "init_s": init_s, "init_limit_s": limit, "init_within_limit": init_s < limit,
        "init_limit_rule": f"MLPerf training: init_stop within {limit / 60:g} min of init_start ({division} division)",
    }


def parse(text: str) -> list[dict[str, Any]]:
    """The events of an MLLOG log, in order (lines without the prefix are ignored, as MLPerf's checker does)."""
    events = []
    for line in text.splitlines():
        at = line.find(PREFIX)
        if at >= 0:
            events.append(json.loads(line[at + len(PREFIX) :]))
    return events


def check_common(path: Path, ruleset: str = "6.1.0") -> tuple[bool, list[str]]:
    """Run the official checker's common training rules (mlperf-logging's training_<ruleset>/common.yaml).

    Only the common rules: the division files it would queue next (open_/closed_common.yaml) accept only
    MLPerf's own benchmark names and then open a per-benchmark file named after the value, which for a
    TrainBench name ("cv/digits_cnn") is a path that does not exist and crashes the checker (FACTS.md).
    A TrainBench workload is never one of MLPerf's benchmarks, so those rules cannot apply to it.
    Returns (passed, the checker's messages).
    """
    from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser

    checker = mlp_compliance.make_checker("training", ruleset, quiet=True, werror=False)
    lines, errors = mlp_parser.parse_file(str(path), ruleset=ruleset)
    messages = [f"parse error: {line}: {error}" for line, error in errors]
    folder = Path(mlp_compliance.__file__).parent
    try:
        checker.configured_checks(lines, str(folder / f"training_{ruleset}" / "common.yaml"))
    finally:
        mlp_compliance.enqueued_configs.clear()  # the division/benchmark files queued by POST rules
    messages += [str(m) for m in (*checker.not_overwritable, *checker.overwritable.values())]
    return not messages, messages


def check_benchmark(path: Path, ruleset: str = "6.1.0") -> tuple[bool, list[str]]:
    """The official checker's whole training ruleset over a log: the common rules, then the division's and the
    per-benchmark file the log's submission_benchmark names (closed_flux1.yaml, ...), as
    `python -m mlperf_logging.compliance_checker --usage training --ruleset 6.1.0 LOG` runs them. For a spec that
    names its `mlperf_benchmark` (check_common is for every other). Returns (passed, the checker's messages)."""
    from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser

    checker = mlp_compliance.make_checker("training", ruleset, quiet=True, werror=False)
    lines, errors = mlp_parser.parse_file(str(path), ruleset=ruleset)
    messages = [f"parse error: {line}: {error}" for line, error in errors]
    try:
        checker.check_loglines(lines, f"training_{ruleset}/common.yaml")
    finally:
        mlp_compliance.enqueued_configs.clear()
    messages += [str(m) for m in (*checker.not_overwritable, *checker.overwritable.values())]
    return not messages, messages
