"""The registry's built-in names all import, and the digits reader gives exactly scikit-learn's arrays."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from suite import registry


@pytest.mark.parametrize("table", ["TASKS", "MODELS", "DATASETS", "BACKENDS"])
def test_every_built_in_name_resolves(table):
    """A spec may name any of these: each must import (an entry without a module fails only at run time)."""
    for name, ref in getattr(registry, table).items():
        module, _, attr = ref.partition(":")
        if table == "BACKENDS" and name in ("deepspeed", "megatron", "npu"):
            continue  # optional frameworks: their availability is reported by `trainbench env` (tests elsewhere)
        assert registry.resolve(name, getattr(registry, table), table.lower()) is not None, (name, ref)


def test_digits_equal_scikit_learns_load_digits_without_importing_it():
    from sklearn.datasets import load_digits

    from suite.data.vision import digits

    images, target = digits.read_arrays()
    bunch = load_digits()
    np.testing.assert_array_equal(images, bunch.images)
    np.testing.assert_array_equal(target, bunch.target)
    code = "import sys; from suite.data.vision import digits; digits.read_arrays(); print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
