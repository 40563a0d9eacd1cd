"""An MLPerf-style `:::MLLOG` log of one run, written with mlperf-logging's `mllog` beside the result file.

Events are logged as they happen (their time_ms is real) into memory, and the file is written atomically
next to the result when the run is recorded, so a killed run leaves neither a half result nor a half log.
Order: init_start, submission/hyper-parameter events, init_stop, run_start, then per evaluation interval
block_start .. block_stop, eval_start, eval_accuracy, eval_stop, and run_stop with status success|aborted.
Trainbench's own status (reached, budget, diverged, ...) is in run_stop's metadata.
"""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path
from typing import Any

from mlperf_logging.mllog import constants as C
from mlperf_logging.mllog.mllog import MLLogger

from suite.results import write_atomic

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

    @property
    def lines(self) -> list[str]:
        return self.handler.lines

    def init_start(self) -> None:
        self.log.start(key=C.INIT_START)
        self.log.event(key=C.SUBMISSION_BENCHMARK, value=self.benchmark)

    def hyperparameters(self, seed: int, global_batch_size: int, optimizer: str, learning_rate: float | None,
                        platform: str, extra: dict[str, Any] | None = None) -> None:
        self.log.event(key=C.SUBMISSION_PLATFORM, value=platform)
        self.log.event(key=C.SEED, value=seed)
        self.log.event(key=C.GLOBAL_BATCH_SIZE, value=global_batch_size)
        self.log.event(key=C.OPT_NAME, value=optimizer)
        if learning_rate is not None:
            self.log.event(key=C.OPT_BASE_LR, value=learning_rate)
        for key, value in (extra or {}).items():
            self.log.event(key=key, value=value)

    def init_stop(self) -> None:
        self.log.end(key=C.INIT_STOP)

    def run_start(self) -> None:
        self.log.start(key=C.RUN_START)
        self.block_start(0, 0)

    def block_start(self, step: int, samples: int) -> None:
        self.log.start(key=C.BLOCK_START, metadata={"first_step_num": step, C.SAMPLES_COUNT: samples})
        self.block_open, self.block_start_samples = True, samples

    def block_stop(self, step: int, samples: int) -> None:
        if self.block_open:
            self.log.end(key=C.BLOCK_STOP, metadata={"step_num": step, C.SAMPLES_COUNT: samples,
                                                      "block_samples": samples - self.block_start_samples})
            self.block_open = False

    def eval_start(self, step: int, samples: int) -> None:
        self.block_stop(step, samples)
        self.log.start(key=C.EVAL_START, metadata={"step_num": step, C.SAMPLES_COUNT: samples})

    def eval_stop(self, step: int, samples: int, target_metric: str, scores: dict[str, float],
                  running: bool) -> None:
        value = scores.get(target_metric)
        self.log.event(key=C.EVAL_ACCURACY, value=None if value is None else float(value),
                       metadata={"step_num": step, C.SAMPLES_COUNT: samples, "metric": target_metric,
                                 "all": {k: float(v) for k, v in scores.items()}})
        self.log.end(key=C.EVAL_STOP, metadata={"step_num": step, C.SAMPLES_COUNT: samples})
        if running:  # the next training interval starts now, unless this evaluation ended the run
            self.block_start(step, samples)

    def run_stop(self, status: str, step: int, samples: int, time_ms: int | None = None) -> None:
        self.block_stop(step, samples)
        self.log.end(key=C.RUN_STOP, time_ms=time_ms,
                     metadata={C.STATUS: C.SUCCESS if status == "reached" else C.ABORTED,
                               "trainbench_status": status, "step_num": step, C.SAMPLES_COUNT: samples})

    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)

    def write(self, path: Path) -> Path:
        self._logger.removeHandler(self.handler)
        return write_atomic(path, self.text())


def parse(text: str) -> list[dict[str, Any]]:
    """The events of an MLLOG log, in order (lines without the prefix are ignored, as MLPerf's checker does)."""
    events = []
    for line in text.splitlines():
        at = line.find(PREFIX)
        if at >= 0:
            events.append(json.loads(line[at + len(PREFIX) :]))
    return events
