"""A Slurm job as TrainBench writes and reads it: the `--slurm` settings, the batch script, and what Slurm says
about a job (squeue while it is queued or running; sacct, else scontrol, once it ended and why).

No Slurm library: the launcher talks to Slurm through its own commands (`sbatch`, `squeue`, `sacct`,
`scontrol`, `scancel`, `srun`), the ones a user would type, so every step can be read in the batch script
and repeated by hand (docs/slurm.md says why not submitit).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# job states after which nothing runs any more (squeue --states=all and sacct both use these names)
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
         "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"}
# what Slurm did to a run, as its record says it: the scheduler ended it on purpose (interrupted) or the
# system failed under it (error)
INTERRUPTED = {"CANCELLED": "cancelled (scancel)", "TIMEOUT": "reached its time limit",
               "PREEMPTED": "preempted", "DEADLINE": "reached its deadline"}
FAILED = {"NODE_FAIL": "lost its node (node failure)", "BOOT_FAIL": "could not boot its node",
          "OUT_OF_MEMORY": "ran out of memory (Slurm's memory limit)", "FAILED": "failed"}
REASON_STATE = {"TimeLimit": "TIMEOUT", "NodeDown": "NODE_FAIL"}  # scontrol's Reason of a job being ended
TIME_RE = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2})$")
QUERY_TIMEOUT_S = 30
REQUEUE_ENV = "TRAINBENCH_SLURM_REQUEUE"  # set by the batch script of a job submitted with requeue=true
# what squeue says of a requeued job until it runs again (a requeued job waits as PENDING, reason BeginTime)
REQUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}
# Slurm's names (partitions, accounts, QOS): letters, digits, `_`, `.`, `-`; --partition takes a comma list
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
MEM_RE = re.compile(r"^\d+[KMGT]?B?$", re.IGNORECASE)  # sbatch --mem: a size, its unit K, M, G or T (MB default)
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")  # a newline ends a directive; what follows is read by bash


class SlurmError(ValueError):
    """Bad `--slurm` input or a Slurm command that refused: the message names the flag, file or command."""


class SlurmConfig(BaseModel):
    """`--slurm KEY=VALUE` and `--slurm FILE.yaml` (later ones win): what every job of an invocation asks for."""

    model_config = ConfigDict(extra="forbid")

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = Field(None, description="time limit, as sbatch --time takes it: MM, HH:MM:SS, D-HH, ...")
    nodes: int = Field(1, ge=1, description="nodes per run (= trainbench run --nnodes)")
    gpus_per_node: int | None = Field(None, ge=0)
    cpus_per_task: int | None = Field(None, ge=1, description="default: torch threads x processes per node")
    mem: str | None = Field(None, description="memory per node, as sbatch --mem takes it (e.g. 64G)")
    sbatch: list[str] = Field(default_factory=list, description="extra #SBATCH lines, e.g. --constraint=h100")
    setup: list[str] = Field(default_factory=list, description="shell lines before the run (module load ...)")
    python: str = Field(default_factory=lambda: sys.executable, description="the interpreter on the nodes")
    workdir: Path | None = Field(None, description="job folders (shared filesystem); default beside --results")
    poll_s: float = Field(1.0, gt=0, le=60, description="how often the driver asks squeue")
    outcome_grace_s: float = Field(30.0, ge=0, description="wait this long for a finished job's report (NFS)")
    srun: bool = Field(False, description="start the ranks through srun even on one node (always on several)")
    master_port: int = Field(29500, ge=1, le=65535, description="torchrun's port on the first node (--nnodes > 1)")
    requeue: bool = Field(False, description="sbatch --requeue: a job Slurm requeues (scontrol requeue, preemption "
                          "with PreemptMode=REQUEUE, a node failure) runs again and resumes from its last checkpoint "
                          "(needs --checkpoint-every or the spec's checkpoint block)")

    @field_validator("time")
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        if v is not None and not TIME_RE.match(v):
            raise ValueError(f"{v!r} is not a Slurm time limit (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)")
        return v

    @field_validator("partition", "account", "qos")
    @classmethod
    def _name(cls, v: str | None, info: Any) -> str | None:
        names = v.split(",") if v is not None and info.field_name == "partition" else [v]
        if v is not None and not all(NAME_RE.match(name or "") for name in names):
            raise ValueError(f"{v!r} is not a Slurm {info.field_name} name (letters, digits, _ . -"
                             f"{'; several as a comma list' if info.field_name == 'partition' else ''})")
        return v

    @field_validator("mem")
    @classmethod
    def _mem(cls, v: str | None) -> str | None:
        if v is not None and not MEM_RE.match(v):
            raise ValueError(f"{v!r} is not a Slurm memory size (a number and K, M, G or T, e.g. 64G)")
        return v

    @field_validator("python", "workdir")
    @classmethod
    def _path(cls, v: Any, info: Any) -> Any:
        if v is not None:
            script_path(Path(v), f"--slurm {info.field_name}")
        return v

    @field_validator("sbatch")
    @classmethod
    def _sbatch(cls, v: list[str]) -> list[str]:
        lines = []
        for line in v:
            line = line.strip().removeprefix("#SBATCH").strip()
            if not line.startswith("-") or CONTROL_RE.search(line):
                raise ValueError(f"{line!r}: an #SBATCH line is one sbatch option, e.g. --qos=high")
            lines.append(line)
        return lines


LIST_KEYS = ("sbatch", "setup")


def parse(values: list[str], base: dict[str, Any] | None = None) -> SlurmConfig:
    """`--slurm` values in order: KEY=VALUE (a list key appends) or a YAML file of the same keys."""
    from suite.spec import SpecError, parse_yaml

    data: dict[str, Any] = dict(base or {})
    for value in values:
        key, eq, text = value.partition("=")
        if eq and key.strip().replace("_", "").isalnum():
            key = key.strip().replace("-", "_")
            if key in LIST_KEYS:
                data[key] = [*data.get(key, []), text]
            else:
                data[key] = text
            continue
        path = Path(value)
        if not path.is_file():
            raise SlurmError(f"--slurm {value!r}: expected KEY=VALUE (e.g. partition=gpu) or a YAML file of them; "
                             "no such file")
        try:
            loaded = parse_yaml(path.read_text(encoding="utf-8"), str(path))
        except (SpecError, OSError, UnicodeDecodeError) as e:
            raise SlurmError(f"--slurm {value}: {e}") from None
        if not isinstance(loaded, dict):
            raise SlurmError(f"--slurm {value}: expected a mapping of settings (partition: gpu, time: '2:00:00', ...)")
        for key, v in loaded.items():
            key = str(key).replace("-", "_")
            data[key] = [*data.get(key, []), *(v if isinstance(v, list) else [v])] if key in LIST_KEYS else v
    try:
        return SlurmConfig.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'value'}: {err['msg']}" for err in e.errors())
        known = ", ".join(SlurmConfig.model_fields)
        raise SlurmError(f"--slurm: {problems} (settings: {known})") from None


def script_path(path: Path, what: str) -> Path:
    """A path that enters the batch script: no control character (a newline would end an #SBATCH directive and
    start a shell command there); everything else is quoted where it is written."""
    if CONTROL_RE.search(str(path)):
        raise SlurmError(f"{what} {str(path)!r}: a path with a newline or another control character cannot go into "
                         "a Slurm batch script (sbatch would read the rest of the line as a shell command)")
    return path


def batch_script(cfg: SlurmConfig, folder: Path, name: str, cpus_per_task: int, root: Path) -> str:
    """The sbatch script of one run: its resources, then the node side (suite/execution/slurm_node.py).

    Every value in an #SBATCH line was checked for its field (SlurmConfig) and every path is quoted (sbatch
    reads quotes in a directive as a shell does); only `setup` is shell, by design."""
    script_path(folder, "the job folder")
    script_path(root, "the suite's folder")
    if not NAME_RE.match(name):
        raise SlurmError(f"job name {name!r}: not a Slurm name")
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --output={shlex.quote(f'{folder}/slurm-%j.out')}",
             "#SBATCH --open-mode=append",
             # without requeue=true, never: a silently repeated run would hide what happened to the first one
             "#SBATCH --requeue" if cfg.requeue else "#SBATCH --no-requeue",
             f"#SBATCH --nodes={cfg.nodes}", "#SBATCH --ntasks-per-node=1", f"#SBATCH --cpus-per-task={cpus_per_task}"]
    for key in ("partition", "account", "qos", "time", "mem"):
        if getattr(cfg, key) is not None:
            lines.append(f"#SBATCH --{key}={getattr(cfg, key)}")
    if cfg.gpus_per_node is not None:
        lines.append(f"#SBATCH --gpus-per-node={cfg.gpus_per_node}")
    lines += [f"#SBATCH {extra}" for extra in cfg.sbatch]
    lines += ["set -e", *cfg.setup, "set +e",
              f"export PYTHONPATH={shlex.quote(str(root))}${{PYTHONPATH:+:$PYTHONPATH}}",
              *([f"export {REQUEUE_ENV}=1"] if cfg.requeue else []),
              f"exec {shlex.quote(cfg.python)} -m suite.execution.slurm_node run {shlex.quote(str(folder))}"]
    return "\n".join(lines) + "\n"


# ---- asking Slurm ------------------------------------------------------------------------------------------


def command(*argv: str, timeout: float = QUERY_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]}: not found on PATH (run on a Slurm login node, or install the Slurm "
                         "client commands)") from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"{argv[0]}: no answer in {timeout:g} s")


@dataclass
class JobState:
    state: str  # RUNNING, PENDING, COMPLETED, TIMEOUT, ...
    reason: str = ""
    exit_code: str = ""
    source: str = ""  # the command that said so
    started: bool = True  # False: it never ran (cancelled while pending)

    def describe(self, job_id: str) -> str:
        what = INTERRUPTED.get(self.state) or FAILED.get(self.state) or self.state.lower()
        extra = f", reason {self.reason}" if self.reason and self.reason not in ("None", "(null)") else ""
        code = f", exit code {self.exit_code}" if self.exit_code and self.exit_code != "0:0" else ""
        return f"slurm: job {job_id} {what} ({self.state}{extra}{code}; from {self.source})"


def queued(job_ids: list[str]) -> dict[str, str] | None:
    """State of each job Slurm still lists (pending, running, completing, or recently ended): id -> state.
    None: squeue gave no answer (the controller busy or restarting), which says nothing about the jobs."""
    if not job_ids:
        return {}
    p = command("squeue", "-h", "--states=all", "-o", "%i|%T", "-j", ",".join(job_ids))
    if p.returncode != 0:
        return {} if "Invalid job id" in p.stderr else None
    out = {}
    for line in p.stdout.splitlines():
        jid, _, state = line.strip().partition("|")
        if jid:
            out[jid] = state.split()[0] if state else ""
    return out


def job_state(job_id: str) -> JobState | None:
    """How a job ended (or stands): sacct when accounting is on, else the job completion log (sacct -c), else
    scontrol (which keeps an ended job for MinJobAge). The first that names a final state wins: while Slurm
    ends a job (its processes have its SIGTERM) scontrol and squeue say only COMPLETING, but Slurm has logged
    the reason (CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL) to accounting and the completion log already."""
    first = None
    for ask in (_sacct, _sacct_completion, _scontrol):
        try:
            got = ask(job_id)
        except SlurmError:
            got = None
        if got is not None and got.state in FINAL:
            return got
        first = first or got
    return first


def _sacct(job_id: str, completion: bool = False) -> JobState | None:
    fields = "State,ExitCode,Start" + ("" if completion else ",Reason")
    p = command("sacct", *(["-c"] if completion else ["-X"]), "-n", "-P", "-j", job_id, "-o", fields)
    rows = [line.split("|") for line in p.stdout.splitlines() if line.strip()]
    if p.returncode != 0 or not rows:
        return None
    row = rows[-1]  # the newest record of this id
    state = row[0].split()[0] if row[0] else "UNKNOWN"
    return JobState(state, row[3] if len(row) > 3 else "", row[1], "sacct -c" if completion else "sacct",
                    started=row[2] not in ("", "None", "Unknown"))


def _sacct_completion(job_id: str) -> JobState | None:
    return _sacct(job_id, completion=True)


def _scontrol(job_id: str) -> JobState | None:
    p = command("scontrol", "show", "job", "-o", job_id)
    if p.returncode != 0 or "JobState=" not in p.stdout:
        return None
    fields = dict(f.split("=", 1) for f in p.stdout.split() if "=" in f)
    if fields.get("JobState") == "COMPLETING" and fields.get("Reason") in REASON_STATE:  # no accounting at all
        fields["JobState"] = REASON_STATE[fields["Reason"]]
    return JobState(fields.get("JobState", "UNKNOWN"), fields.get("Reason", ""), fields.get("ExitCode", ""),
                    "scontrol", started=fields.get("NodeList", "(null)") not in ("", "(null)"))


def hostnames(nodelist: str) -> list[str]:
    """Slurm's compressed node list (node[01-04],gpu7) as host names, by `scontrol show hostnames`."""
    p = command("scontrol", "show", "hostnames", nodelist)
    if p.returncode != 0 or not p.stdout.split():
        raise SlurmError(f"scontrol show hostnames {nodelist}: {p.stderr.strip() or 'no hosts'}")
    return p.stdout.split()


def rendezvous_from_env(env: dict[str, str] | os._Environ[str], master_port: int) -> list[str]:
    """torchrun's static rendezvous for this node of a multi-node job, from what Slurm sets in each task of
    `srun --ntasks-per-node=1`: node count, this node's index, and the first node of the allocation (node 0,
    where global rank 0 runs and writes the result)."""
    try:
        nnodes, node_rank = int(env["SLURM_NNODES"]), int(env["SLURM_NODEID"])
        nodelist = env["SLURM_JOB_NODELIST"]
    except (KeyError, ValueError) as e:
        raise SlurmError(f"not inside a Slurm job step (missing or bad {e}): start the ranks with srun") from None
    master = node_address(hostnames(nodelist)[0])
    return [f"--nnodes={nnodes}", f"--node_rank={node_rank}", f"--master_addr={master}", f"--master_port={master_port}"]


def node_address(node: str) -> str:
    """The address Slurm itself reaches a node at (its NodeAddr), else its name."""
    p = command("scontrol", "show", "node", "-o", node)
    fields = dict(f.split("=", 1) for f in p.stdout.split() if "=" in f) if p.returncode == 0 else {}
    return fields.get("NodeAddr") or node


def requeue_pending(status: str) -> bool:
    """Inside a job submitted with requeue=true: this attempt ended (`status` interrupted or error) because Slurm
    requeued the job, so its next attempt resumes from the last checkpoint and records the run; this one records
    nothing. Slurm counts the job's restarts (scontrol's Restarts) before it signals the job's processes, so a count
    above the one this attempt started with (SLURM_RESTART_COUNT, unset on the first) says the job runs again."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if os.environ.get(REQUEUE_ENV) != "1" or not job_id or status not in ("interrupted", "error"):
        return False
    p = command("scontrol", "show", "job", "-o", job_id)
    fields = dict(f.split("=", 1) for f in p.stdout.split() if "=" in f) if p.returncode == 0 else {}
    try:
        return int(fields.get("Restarts", "0")) > int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        return False


def slurm_reason(result: Any) -> Any:
    """A record's amendment inside a Slurm job (`IsolatedRun(amend=...)`): a run stopped because Slurm ended its
    job says so, from the controller's own word: `slurm: job 12 reached its time limit (TIMEOUT ...)`. A run
    Slurm did not end (the driver's stop, its own crash) is left as it is."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id or result.status not in ("interrupted", "error"):
        return result
    state = job_state(job_id)
    if state is None or (state.state not in INTERRUPTED and state.state not in FAILED):
        return result
    status = "error" if state.state in FAILED else result.status
    return result.model_copy(update={"status": status, "error": f"{state.describe(job_id)}; {result.error}"})
