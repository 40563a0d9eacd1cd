"""The writers of small data sets in the exact on-disk formats of the full-tier readers now live in the product
(suite/data/synthetic/files.py: `trainbench data prepare NAME --synthetic` uses them); the tests take them from there."""

from __future__ import annotations

from suite.data.synthetic.files import (  # noqa: F401 - re-exported for the tests
    MARKER,
    write_c4_indexed,
    write_cifar10,
    write_fashion,
    write_fused_qkv_llama,
    write_govreport,
    write_idx,
    write_imagefolder,
    write_megatron_indexed,
    write_modded_shard,
    write_ogbg,
    write_shards,
)
from suite.data.synthetic.flux_files import write_flux1, write_flux_split  # noqa: F401 - re-exported for the tests
from suite.data.synthetic.overrides import (  # noqa: F401 - re-exported for the tests
    flux1_overrides,
    full_tier_overrides,
    gsm8k_overrides,
    rec_overrides,
)
