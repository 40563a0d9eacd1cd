"""The --set overrides that point every full-tier recipe's tiny variant at small synthetic files of its real format
(benchmarks/device_check.py --synthetic-data, the tests): the files come from suite/data/synthetic/files.py's writers."""

from __future__ import annotations

from pathlib import Path

from suite.data.synthetic.files import (
    write_c4_indexed,
    write_cifar10,
    write_fused_qkv_llama,
    write_govreport,
    write_imagefolder,
    write_marker,
    write_ogbg,
    write_shards,
)
from suite.data.synthetic.flux_files import write_flux1


def full_tier_overrides(base: Path) -> dict[str, dict[str, str]]:
    """Small files in each full-tier data set's on-disk format, and the --set that points each spec at them (`base`
    gets MARKER: runs on these files are recorded synthetic)."""
    write_marker(base, "full_tier_overrides")
    return {
        "cv/cifar10_resnet": {"data.path": str(write_cifar10(base / "cifar", per_batch=16))},
        "cv/imagenet_resnet50": {"data.path": str(write_imagefolder(base / "inet", classes=2, per_class=4))},
        "nlp/gpt2_124m": {"data.path": str(write_shards(base / "fw", vocab=512))},
        "gnn/ogbg_molpcba": {"data.path": str(write_ogbg(base, graphs=40))},
        "rl/halfcheetah_ppo": {},
        "rl/qwen35_397b_grpo": {},  # its tiny variant runs on generated repositories (suite/data/rl/bugfix_repos.py)
        **{name: {"data.path": str(write_c4_indexed(base / "c4", vocab=512))}
           for name in ("nlp/llama31_8b", "nlp/gpt_oss_20b", "nlp/deepseekv3_671b")},
        "nlp/llama2_70b_lora": {"data.path": str(write_govreport(base / "govreport", seq_len=64, vocab=512)),
                                "model.checkpoint": str(write_fused_qkv_llama(base / "llama_fused_qkv"))},
    } | flux1_overrides(base) | gsm8k_overrides(base) | rec_overrides(base)


def rec_overrides(base: Path) -> dict[str, dict[str, str]]:
    """rec/dlrm_dcnv2's Criteo days (numpy) and rec/dlrmv4's processed Yambda (parquet: needs pyarrow, else left out
    as flux1 is), generated in the real layouts by suite/data/rec/{criteo,yambda}_fixture.py."""
    import importlib.util

    from suite.data.rec import criteo_fixture

    out = {"rec/dlrm_dcnv2": {"data.path": str(criteo_fixture.write(base / "criteo"))}}
    if importlib.util.find_spec("pyarrow") is not None:
        from suite.data.rec import yambda_fixture

        out["rec/dlrmv4"] = {"data.path": str(yambda_fixture.write(base / "yambda"))}
    return out


def gsm8k_overrides(base: Path) -> dict[str, dict[str, str]]:
    """rl/gsm8k_grpo's files (suite/data/synthetic/gsm8k.py: a tiny Qwen2 folder, veRL's GSM8K parquet; pyarrow)."""
    import importlib.util

    if importlib.util.find_spec("pyarrow") is None:
        return {}
    from suite.data.synthetic import gsm8k

    root = gsm8k.write(base / "gsm8k-tiny")
    model = str(root / "model")
    return {"rl/gsm8k_grpo": {"data.path": str(root / "data"), "data.tokenizer": model, "model.checkpoint": model}}


def flux1_overrides(base: Path) -> dict[str, dict[str, str]]:
    """cv/flux1's Arrow files need pyarrow (the `diffusion` extra): without it (a lent device machine has no package
    registry) flux1 is left out, so its data is reported missing and every other workload still gets its files."""
    import importlib.util

    if importlib.util.find_spec("pyarrow") is None:
        return {}
    return {"cv/flux1": {"data.path": str(write_flux1(base / "flux1", n_train=8, n_val=8))}}
