"""benchmarks/device_check.py's torchtitan row (issue 37, benchmarks/device_titan.py): torchtitan's own Llama 3 config through the torchtitan
backend's parallelize path, timed, beside torchtitan's published Llama 3.1 8B figure. On a device it runs the 8B
config at sequence 8192 on the layers that fit; here the same code on torchtitan's `debugmodel` flavor, CPU, SDPA."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from support.promised import require

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
require("torchtitan.models.llama3", extra="torchtitan")
import device_titan  # noqa: E402


def test_the_torchtitan_row_trains_torchtitans_own_config_and_records_the_published_figure():
    torch.set_num_threads(1)
    row = device_titan.titan_llama8b_row(torch.device("cpu"), None, compile=False, steps=3, flavor="debugmodel",
                                         seq_len=64, attention="sdpa")
    assert row["status"] == "budget", row
    assert row["layers"] == row["of_layers"] == 6 and row["tokens_per_s"] > 0 and row["step_time_p50_s"] > 0
    assert row["published"]["tokens_per_s_per_gpu"] == 6667


def test_the_layer_count_follows_the_device_memory():
    """On a device of 80 GiB the 8B config keeps fewer layers than on 141 GiB, at least one, at most 32 (the
    figure is the estimate's; the run then steps down on out-of-memory)."""
    from torchtitan.models.llama3 import llama3_configs

    seen = {}
    real = device_titan._titan_steps

    def fake(config, *args):
        seen[len(config.layers)] = True
        return {"status": "budget", "error": None, "tokens_per_s": 1.0}

    device_titan._titan_steps = fake
    try:
        small = device_titan.titan_llama8b_row(torch.device("cpu"), 80 * 2**30, False)["layers"]
        large = device_titan.titan_llama8b_row(torch.device("cpu"), 141 * 2**30, False)["layers"]
    finally:
        device_titan._titan_steps = real
    assert 1 <= small < large <= len(llama3_configs["8B"](attn_backend="flex").layers)
