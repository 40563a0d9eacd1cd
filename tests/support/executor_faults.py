"""Workload tasks that fail outside the harness's own error handling, for the executor fault tests."""

from __future__ import annotations

import os

from suite.data.base import DataMissing
from suite.workloads.image_classification import ImageClassification


class MissingDataTask(ImageClassification):
    """Raises DataMissing on the worker (the harness re-raises it): data not installed on that node."""

    def __init__(self, spec, ctx):
        raise DataMissing("fault injection: data set not installed on this worker")


class CrashingTask(ImageClassification):
    """Kills its own process without a word, as an OOM kill or a segfault would."""

    def __init__(self, spec, ctx):
        os._exit(3)
