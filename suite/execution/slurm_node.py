"""Inside a Slurm job: the node side of `--executor slurm` (the batch script execs `python -m
suite.execution.slurm_node run FOLDER`).

`run`: the run's isolated child (suite/execution/isolated.py: the same child, heartbeat, watchdog and fallback
record as on a laptop) on the job's first node. The child writes its result into the results folder itself
(a shared filesystem), so the record exists whatever becomes of the driver; then this process leaves an
`outcome` file in the job folder for the driver. Stops reach it two ways:
- the driver's (its SIGINT/SIGTERM, --fail-fast): a file `stop.N` in the job folder holding the signal, passed
  on to the child as the local launchers pass theirs (a third one kills);
- Slurm's (scancel, time limit, preemption, node failure): Slurm signals every process of the job, the child
  included, so the signal is only noted here (a second copy would read as "the user means it"). The record
  says what Slurm did (`slurm_job.slurm_reason`, asked of the controller when the record is written).
The driver's death changes nothing here: the job runs to its end and records its result.
A job submitted with `requeue=true` that Slurm requeues (its restart count rose) leaves no outcome and no record:
its next run resumes from the last checkpoint and records the run (`slurm_job.requeue_pending`).

`ranks NPROC PORT JOB`: one task of `srun --ntasks-per-node=1` (a multi-node run): torchrun on this node, with
the static rendezvous from Slurm's environment (`slurm_job.rendezvous_from_env`).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import socket
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

POLL_S = 0.2
AMEND = "suite.execution.slurm_job:slurm_reason"


@dataclass
class NodeJob:
    """What the driver hands the job (job.pkl in the job folder)."""

    req: Any  # RunRequest
    run_id: str
    nproc: int = 1
    nnodes: int = 1
    quiet: bool = True
    srun: bool = False  # start the ranks through srun even on one node
    master_port: int = 29500
    python: str = sys.executable


def ranks_command(job: NodeJob) -> list[str]:
    """srun: one task per node, each starting torchrun there (`ranks` below); the job file's path follows."""
    n = job.nnodes
    return ["srun", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            "--export=ALL", job.python, "-m", "suite.execution.slurm_node", "ranks", str(job.nproc),
            str(job.master_port)]


def run(folder: Path) -> int:
    noted: list[int] = []
    for s in (signal.SIGINT, signal.SIGTERM):  # Slurm's stop: the child has its own copy (module docstring);
        signal.signal(s, lambda signum, _frame: noted.append(signum))  # first, before the imports take seconds
    from suite.execution import child
    from suite.execution.isolated import IsolatedRun
    from suite.execution.slurm_job import requeue_pending
    from suite.results import record as results

    def note(signum: int, _frame: Any) -> None:
        noted.append(signum)
        child._early_signals.append(signum)  # a child forked before it set its own handlers keeps it this way

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, note)
    if (folder / "outcome").exists():  # a requeued job whose run had already ended and reported: nothing to redo
        return 0
    with open(folder / "job.pkl", "rb") as f:
        job: NodeJob = pickle.load(f)  # noqa: S301 - written by our driver into its own job folder
    multi = job.nnodes > 1 or job.srun
    if job.nproc == 1 and not multi:  # the child is forked from here: import what it needs once, as the
        import importlib  # local launchers' fork server does (suite/execution/forkserver.py)

        from suite.execution import forkserver

        for module in forkserver.warm_modules(job.req.backend):
            importlib.import_module(module)
    child._early_signals.clear()  # a stop that came before the fork is passed on below, not inherited
    isolated = IsolatedRun(job.req, nproc=job.nproc, quiet=job.quiet, warm=False, fork=True, run_id=job.run_id,
                           amend=AMEND,
                           torchrun_args=[f"--nnodes={job.nnodes}"] if multi else None,
                           tmp_root=str(folder) if multi else None,
                           ranks_command=ranks_command(job) if multi else None).start()
    for signum in noted:  # Slurm's stop came before the child existed: it has no copy, pass it on
        isolated.stop(signum)
    noted.clear()
    results.write_atomic(folder / "started", json.dumps({
        "host": socket.gethostname(), "pid": os.getpid(), "job": os.environ.get("SLURM_JOB_ID")}))
    seen = 0
    while not isolated.poll():
        while noted:
            isolated.noted(noted.pop(0))
        while (folder / f"stop.{seen + 1}").exists():
            seen += 1
            try:
                signum = int((folder / f"stop.{seen}").read_text().strip() or signal.SIGTERM)
            except (OSError, ValueError):
                signum = signal.SIGTERM
            isolated.stop(signum)
        time.sleep(POLL_S)
    if not isolated.report.exists() and requeue_pending("interrupted"):  # the child recorded nothing: the job's
        shutil.rmtree(isolated.tmp, ignore_errors=True)  # next run resumes from its checkpoint and records it
        return 0
    out = isolated.outcome()
    results.write_atomic(folder / "outcome", json.dumps({
        "result": out.result.model_dump_json(), "path": str(out.path) if out.path else None,
        "data_missing": out.data_missing, "signalled": out.signalled, "rc": out.returncode,
        "write_error": out.write_error, "recorded_by": out.recorded_by}))
    return 0


def ranks(nproc: int, master_port: int, job_path: str) -> int:
    """This node's torchrun (one srun task per node): the child job as every rank here reads it."""
    from suite.execution.child import Job
    from suite.execution.processes import process_start_time, torchrun_command, torchrun_env
    from suite.execution.slurm_job import rendezvous_from_env

    rendezvous = rendezvous_from_env(os.environ, master_port)
    node = int(os.environ["SLURM_NODEID"])
    with open(job_path, "rb") as f:
        job: Job = pickle.load(f)  # noqa: S301 - the launcher's own job file
    # the ranks watch this node's torchrun (this very process after exec: same pid and start time); node R > 0
    # leaves its own report (node 0's is the one the launcher reads)
    me = (os.getpid(), process_start_time(os.getpid()) or "")
    job = replace(job, parent=me, report=job.report if node == 0 else f"{job.report}.node{node}")
    mine = f"{job_path}.node{node}"
    with open(mine, "wb") as f:
        pickle.dump(job, f)
    cmd = torchrun_command(nproc, "suite.execution.child", [mine], rendezvous)
    os.execve(cmd[0], cmd, torchrun_env(dict(os.environ)))
    return 0  # not reached


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"] and len(argv) == 2:
        return run(Path(argv[1]))
    if argv[:1] == ["ranks"] and len(argv) == 4:
        return ranks(int(argv[1]), int(argv[2]), argv[3])
    sys.stderr.write("usage: python -m suite.execution.slurm_node run FOLDER | ranks NPROC PORT JOB\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
