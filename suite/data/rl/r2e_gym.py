"""R2E-Gym tasks as MLPerf Training 6.1's `qwen35_397b_grpo` reads them (mlcommons/training `llm_moe_grpo`,
NVIDIA NeMo-RL `tools/create_r2e_gym_easy_subset_jsonl.py`): two JSONL files in NeMo Gym's row format, read from a
local folder, never downloaded.

- training: `benchmark_r2e_gym_easy_train.filtered.curriculum-v2-classic-cycles2-seed20260710.jsonl`, curriculum
  ordered (the reference runs with `data.shuffle: false`: row order is part of the benchmark, kept here as read);
- validation: `benchmark_r2e_gym_easy_val.jsonl` (held-out tasks, every one evaluated pass@4 at each validation).

One row: `{"responses_create_params": {"input": [], "metadata": {"instance_id", "base_commit", "dataset_name",
"split", "problem_statement", "hints_text", "version", "created_at", "instance_dict", "repo"}, "model",
"temperature", "top_p"}, "agent_ref": {"type", "name"}}` where `instance_dict` is the R2E instance serialised as a
JSON string (its `container_formatter` is the task's SIF image path, `docker_image` the image it was built from,
`expected_output_json` the tests' expected verdicts). A row that does not parse or lacks a field is refused with
the file, the line and the field (DataFormatError, exit 2 before the run starts).

The task-container contract (docs/grpo.md, "qwen35_397b_grpo"): each task runs in its own Apptainer/Singularity
image, `<sif_dir>/r2egym/<instance_id>.sif` or `<sif_dir>/<instance_id>.sif` (the two layouts the reference
accepts), run by `apptainer` (or `singularity`) found on PATH. A runner provides the images (built by the
reference's `build_r2e_gym_sif.sh`) and the runtime; `container_runtime()` says which is there, or why none is.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from suite.data.base import DataMissing
from suite.registry import Component

TRAIN_FILE = "benchmark_r2e_gym_easy_train.filtered.curriculum-v2-classic-cycles2-seed20260710.jsonl"
VAL_FILE = "benchmark_r2e_gym_easy_val.jsonl"
METADATA_FIELDS = ("instance_id", "base_commit", "problem_statement", "instance_dict", "repo")
INSTANCE_FIELDS = ("instance_id", "docker_image", "expected_output_json", "container_formatter")
RUNTIMES = ("apptainer", "singularity")


class DataFormatError(DataMissing):
    """A row of a task file that is not in the reference's format: names the file, the line and the field. Handled
    as a missing data set is (suite/data/base.py, as gsm8k's malformed rows): nothing recorded, the CLI exits 2."""


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder with the two JSONL files; relative paths are under "
                             "TRAINBENCH_DATA (default: TRAINBENCH_DATA/r2e_gym)")
    train_file: str = Field(default=TRAIN_FILE, description="the curriculum-ordered training JSONL")
    val_file: str = Field(default=VAL_FILE, description="the held-out validation JSONL")
    sif_dir: str | None = Field(default=None, description="folder of per-task SIF images (NEMO_GYM_SWE_SIF_DIR)")
    train_tasks: int = Field(default=685, gt=0, description="rows the training file must hold")
    eval_tasks: int = Field(default=251, gt=0, description="held-out tasks evaluated (MLLOG eval_samples)")
    pass_k: int = Field(default=4, gt=0, description="trajectories per validation task (pass@k)")
    max_turns: int = Field(default=30, gt=0, description="agent turns per trajectory")
    eval_temperature: float = Field(default=0.1, ge=0, description="validation sampling temperature (the reference's "
                                    "0.1; its top-p 0.95 is the grpo block's eval_sampling.top_p)")


@dataclass(frozen=True)
class R2ETask:
    instance_id: str
    repo: str
    base_commit: str | None
    problem_statement: str
    docker_image: str
    container: str          # the SIF path the row names (instance_dict.container_formatter)
    expected_tests: dict[str, Any]
    line: int               # 1-based line of the file it came from


def _field(obj: Any, name: str, where: str) -> Any:
    if not isinstance(obj, dict) or name not in obj:
        raise DataFormatError(f"{where}: missing field {name!r}")
    return obj[name]


def read_tasks(path: Path) -> list[R2ETask]:
    """Every row of one task file, in file order (the curriculum's order for the training file)."""
    path = Path(path)
    tasks: list[R2ETask] = []
    with path.open(encoding="utf-8") as f:
        for n, text in enumerate(f, start=1):
            if not text.strip():
                continue
            where = f"{path}:{n}"
            try:
                row = json.loads(text)
            except json.JSONDecodeError as e:
                raise DataFormatError(f"{where}: not a JSON object ({e.msg})") from None
            params = _field(row, "responses_create_params", where)
            meta = _field(params, "metadata", f"{where}: responses_create_params")
            got = {k: _field(meta, k, f"{where}: responses_create_params.metadata") for k in METADATA_FIELDS}
            try:
                inst = json.loads(got["instance_dict"])
            except (TypeError, json.JSONDecodeError):
                raise DataFormatError(f"{where}: responses_create_params.metadata.instance_dict is not a JSON "
                                      "object serialised as a string") from None
            ctx = f"{where}: responses_create_params.metadata.instance_dict"
            idict = {k: _field(inst, k, ctx) for k in INSTANCE_FIELDS}
            if idict["instance_id"] != got["instance_id"]:
                raise DataFormatError(f"{ctx}.instance_id {idict['instance_id']!r} differs from the row's "
                                      f"instance_id {got['instance_id']!r}")
            try:
                expected = json.loads(idict["expected_output_json"])
            except (TypeError, json.JSONDecodeError):
                expected = None
            if not isinstance(expected, dict):
                raise DataFormatError(f"{ctx}.expected_output_json is not a JSON object")
            tasks.append(R2ETask(got["instance_id"], got["repo"], got["base_commit"], got["problem_statement"],
                                 idict["docker_image"], idict["container_formatter"], expected, n))
    seen: dict[str, int] = {}
    for t in tasks:
        if t.instance_id in seen:
            raise DataFormatError(f"{path}:{t.line}: instance_id {t.instance_id!r} repeats line {seen[t.instance_id]}")
        seen[t.instance_id] = t.line
    return tasks


def sif_image(sif_dir: Path, instance_id: str) -> Path | None:
    """The task's image in either layout the reference accepts, or None."""
    for p in (Path(sif_dir) / "r2egym" / f"{instance_id}.sif", Path(sif_dir) / f"{instance_id}.sif"):
        if p.is_file():
            return p
    return None


def container_runtime() -> tuple[str | None, str]:
    """(the runtime's path, '') when apptainer or singularity is on PATH, else (None, why not)."""
    for name in RUNTIMES:
        if found := shutil.which(name):
            return found, ""
    return None, ("no container runtime: the R2E-Gym tasks run in per-task Apptainer/Singularity images and "
                  "neither `apptainer` nor `singularity` is on PATH")


def _folder(cfg: Config) -> Path:
    from suite.data.locate import data_root, named_dir

    if cfg.path:
        p = Path(cfg.path).expanduser()
        return p if p.is_absolute() else data_root() / p
    return named_dir("r2e_gym")


def locate(cfg: Config) -> Path:
    """The folder holding both task files (DataMissing naming the missing one)."""
    folder = _folder(cfg)
    for name in (cfg.train_file, cfg.val_file):
        if not (folder / name).is_file():
            raise DataMissing(f"R2E-Gym task file {folder / name} is missing (mlcommons/training llm_moe_grpo's "
                              "download_dataset.sh writes it; `trainbench data prepare r2e_gym --from PATH`)")
    return folder


def prepare(source: Path | None) -> str:
    """Check both files row by row, then link the folder as $TRAINBENCH_DATA/r2e_gym."""
    from suite.data.locate import link_local, named_dir

    if source is None:
        raise DataMissing("r2e_gym: give --from PATH, the folder with the reference's two task JSONL files")
    cfg = Config(path=str(Path(source).expanduser().resolve()))
    folder = locate(cfg)
    train, val = read_tasks(folder / cfg.train_file), read_tasks(folder / cfg.val_file)
    link_local("r2e_gym", folder)
    return f"r2e_gym: {len(train)} training and {len(val)} validation tasks in {folder}, linked as {named_dir('r2e_gym')}"


def load(cfg: Config, *args: Any, **kwargs: Any) -> Any:
    """Read and check both files (format, row counts, disjoint splits, an image per task, a runtime); the agent
    environment that runs the tasks in their containers is not in this suite yet: say so after the checks."""
    folder = locate(cfg)
    files = [folder / cfg.train_file, folder / cfg.val_file]
    train, val = read_tasks(files[0]), read_tasks(files[1])
    if len(train) != cfg.train_tasks:
        raise DataFormatError(f"{files[0]}: {len(train)} tasks, data.train_tasks is {cfg.train_tasks}")
    if len(val) < cfg.eval_tasks:
        raise DataFormatError(f"{files[1]}: {len(val)} tasks, fewer than data.eval_tasks {cfg.eval_tasks}")
    if common := {t.instance_id for t in train} & {t.instance_id for t in val}:
        raise DataFormatError(f"{files[1]}: {len(common)} tasks also in {files[0]}, e.g. {sorted(common)[0]!r}")
    if cfg.sif_dir is None:
        raise DataMissing("data.sif_dir is not set: the per-task SIF images (NEMO_GYM_SWE_SIF_DIR)")
    missing = [t.instance_id for t in (*train, *val) if sif_image(Path(cfg.sif_dir), t.instance_id) is None]
    if missing:
        raise DataMissing(f"{len(missing)} task images missing under {cfg.sif_dir}, e.g. {missing[0]}.sif")
    runtime, why = container_runtime()
    if runtime is None:
        raise DataMissing(why)
    raise DataMissing("the R2E-Gym agent environment (OpenHands CodeAct in the task's container) is not "
                      "implemented in this suite: the full tier's task files and images check out, but nothing "
                      "here runs them yet")


def requires() -> str | None:
    """What `trainbench list --matrix` says of a workload on these tasks: None when a container runtime is here."""
    return None if container_runtime()[0] else container_runtime()[1] + " (a runner provides it and the per-task " \
        "SIF images in data.sif_dir: docs/grpo.md, 'qwen35_397b_grpo')"


COMPONENT = Component(Config, load=load, prepare=prepare, requires=requires)
