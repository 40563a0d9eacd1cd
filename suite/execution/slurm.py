"""`--executor slurm [--slurm KEY=VALUE | --slurm FILE.yaml ...]`: each run (each seed) is a Slurm batch job.

The driver (`trainbench run` on a login node) writes one job folder per run on the shared filesystem
(`workdir`, default `.trainbench-slurm` beside the results folder): the pickled request, the batch script
(suite/execution/slurm_job.py: partition, account, time limit, GPUs per node, nodes, extra #SBATCH lines), and
submits it with `sbatch`. On the node, suite/execution/slurm_node.py runs the same isolated child as every
other launcher, which writes the result into the results folder itself. The driver follows its jobs with
`squeue`, copies their output to stderr, and yields each Outcome from the `outcome` file its node leaves.

The fault contract:
- the driver's SIGINT/SIGTERM (and --fail-fast): a running job gets a `stop.N` file (its node passes the
  signal on: `interrupted`, "stopped by signal SIGINT"), a pending one is cancelled (it never ran: nothing
  to record); the driver waits for every job to end, so nothing is left running; a third signal cancels all;
- `--slurm requeue=true` (sbatch --requeue): a job Slurm requeues (scontrol requeue, preemption, a node
  failure) records nothing; the driver follows it to its next run, which resumes from the last checkpoint (in
  the job folder) and records the run with the restart and the time it lost (Result.goodput.recovery);
- scancel, a time limit, preemption, a node failure: the child records the run with what Slurm did
  (`slurm: job 12 reached its time limit (TIMEOUT ...)`); a job that ended without a word from its node (the
  node died, Slurm killed everything) is recorded by the driver from sacct (else scontrol): never lost;
- a hang, a crash, a dead rank: the child's watchdog and its parent on the node, as everywhere;
- the driver's death (SIGKILL, a closed ssh session): the jobs run on and record their results; an
  exception in the driver cancels its jobs.
"""

from __future__ import annotations

import json
import pickle
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import suite
from suite.execution import slurm_job
from suite.execution.launch import Control, Options, Outcome
from suite.execution.slurm_job import FAILED, FINAL, SlurmConfig, SlurmError

if TYPE_CHECKING:
    from suite.harness import RunRequest

TICK_S = 0.2
RUNNING = ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT")  # it has processes
WORKDIR = ".trainbench-slurm"


@dataclass
class Tracked:
    """One submitted job, as the driver follows it."""

    req: RunRequest
    run_id: str
    folder: Path
    job_id: str
    state: str = "PENDING"
    ran: bool = False  # seen running (or its node said it started)
    stops: int = 0  # stop.N files written
    dequeued: bool = False  # the driver cancelled it while it was pending
    ended_at: float | None = None  # when squeue stopped listing it as pending/running
    log_pos: int = 0
    requeues: int = 0  # times Slurm requeued it (requeue=true): each time it is followed to its next run


def config(options: Options) -> SlurmConfig:
    """The invocation's Slurm settings: the --slurm values, with --nnodes as the node count."""
    cfg = slurm_job.parse(options.slurm)
    if options.nnodes > 1:
        if "nodes" in cfg.model_fields_set and cfg.nodes != options.nnodes:
            raise SlurmError(f"--nnodes {options.nnodes} and --slurm nodes={cfg.nodes} disagree: give one of them")
        cfg = cfg.model_copy(update={"nodes": options.nnodes})
    return cfg


class SlurmLauncher:
    name = "slurm"

    def __init__(self, options: Options, jobs: int = 1):
        self.options = options
        self.cfg = config(options)
        if shutil.which("sbatch") is None:
            raise SlurmError("--executor slurm: sbatch not found on PATH (run on a Slurm login node, or install "
                             "the Slurm client commands and point SLURM_CONF at the cluster's slurm.conf)")
        self._test_submission()

    def _test_submission(self) -> None:
        """sbatch --test-only with these resources: a bad partition, account or option is refused now (exit 2)."""
        opts = [line.removeprefix("#SBATCH ") for line in slurm_job.batch_script(
            self.cfg, Path("/tmp"), "trainbench-check", self._cpus(None)[1], Path(".")).splitlines()
            if line.startswith("#SBATCH") and "--output" not in line and "--open-mode" not in line]
        p = slurm_job.command("sbatch", "--test-only", *opts, "--wrap", "true")
        if p.returncode != 0:
            said = " ".join(p.stderr.split())[-600:]
            raise SlurmError(f"--executor slurm: sbatch refuses these settings ({' '.join(opts)}): {said}")

    def _cpus(self, threads: int | None) -> tuple[int, int]:
        """(torch threads per process, CPUs per task): --threads, else cpus_per_task / processes, else 1."""
        nproc = self.options.nproc
        if threads is None:
            threads = max(1, self.cfg.cpus_per_task // nproc) if self.cfg.cpus_per_task else 1
        return threads, self.cfg.cpus_per_task or threads * nproc

    def workdir(self, results_dir: Path | None) -> Path:
        if self.cfg.workdir is not None:
            return self.cfg.workdir
        base = Path(results_dir).absolute().parent if results_dir is not None else Path.cwd()
        return base / WORKDIR

    # ---- submitting ---------------------------------------------------------------------------------------

    def submit(self, req: RunRequest) -> Tracked | Outcome:
        from suite.execution.slurm_node import NodeJob
        from suite.results import record as results

        threads, cpus = self._cpus(req.threads)
        # the job may start elsewhere than here (`--slurm sbatch=--chdir=...`): its folders by their full path
        req = replace(req, threads=threads, results_dir=req.results_dir and Path(req.results_dir).absolute(),
                      profile_dir=req.profile_dir and Path(req.profile_dir).absolute())
        run_id = results.new_run_id()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        folder = self.workdir(req.results_dir) / f"{stamp}-{run_id}"
        folder.mkdir(parents=True, exist_ok=False)
        if self.cfg.requeue and req.checkpoint_dir is None:  # where every run of the job finds the checkpoints
            req = replace(req, checkpoint_dir=folder / "checkpoints")
        job = NodeJob(req=req, run_id=run_id, nproc=self.options.nproc, nnodes=self.cfg.nodes,
                      quiet=self.options.quiet, srun=self.cfg.srun, master_port=self.cfg.master_port,
                      python=self.cfg.python)
        with open(folder / "job.pkl", "wb") as f:
            pickle.dump(job, f)
        name = f"tb-{results.slug(req.spec.name.replace('/', '-'))}-s{req.seed}"
        root = Path(suite.__file__).resolve().parent.parent
        (folder / "job.sh").write_text(slurm_job.batch_script(self.cfg, folder, name, cpus, root))
        p = slurm_job.command("sbatch", "--parsable", str(folder / "job.sh"))
        job_id = p.stdout.strip().split(";")[0]
        if p.returncode != 0 or not job_id.isdigit():
            return self._fallback_new(req, run_id, f"slurm: sbatch refused the job ({' '.join(p.stderr.split())})")
        return Tracked(req, run_id, folder, job_id)

    def _fallback_new(self, req: RunRequest, run_id: str, error: str, status: str = "error") -> Outcome:
        from suite.measure.environment import fingerprint
        from suite.results import dead_runs
        from suite.results import record as results

        result = dead_runs.error_result(req, status, error, fingerprint(), run_id=run_id,  # type: ignore[arg-type]
                                      world_size=self.options.nproc * self.cfg.nodes)
        try:
            path = results.write_run(req.results_dir, result) if req.results_dir else None
        except results.ResultWriteError as e:
            return Outcome(result, None, None, None, 1, str(e))
        return Outcome(result, path, None)

    # ---- following --------------------------------------------------------------------------------------

    def run(self, requests: list[RunRequest], control: Control) -> Iterator[Outcome]:
        live: list[Tracked] = []
        sent = 0
        next_poll = 0.0
        try:
            for req in requests:
                if control.stopping:
                    break
                got = self.submit(req)
                if isinstance(got, Outcome):
                    yield got
                else:
                    live.append(got)
            while live:
                while sent < control.count:
                    sent += 1
                    self._stop_all(live, sent, control.signum or signal.SIGTERM)
                if time.monotonic() >= next_poll:
                    states = slurm_job.queued([t.job_id for t in live])
                    now = time.monotonic()
                    for t in live if states is not None else []:  # no answer (a busy controller): ask again
                        t.state = (states or {}).get(t.job_id, "GONE")
                        if self.cfg.requeue and t.ran and t.state in slurm_job.REQUEUED:
                            self._requeued(t)
                        t.ran = t.ran or t.state in RUNNING or (t.folder / "started").exists()
                        if t.ended_at is None and (t.state in FINAL or t.state == "GONE"):
                            t.ended_at = now
                    next_poll = now + self.cfg.poll_s
                for t in list(live):
                    self._pump(t)
                    done, outcome = self._finished(t)
                    if done:
                        live.remove(t)
                        self._pump(t)
                        if outcome is not None:
                            if outcome.result.status in ("reached", "budget", "measured"):
                                shutil.rmtree(t.folder, ignore_errors=True)
                            yield outcome
                time.sleep(TICK_S)
        finally:
            if live:  # the driver itself is failing (an exception here or in its caller): leave no job behind
                slurm_job.command("scancel", *[t.job_id for t in live])

    def _requeued(self, t: Tracked) -> None:
        """Slurm requeued a job that ran (scontrol requeue, preemption, a node failure): it waits to run again, and
        its next run resumes from the last checkpoint (its earlier run recorded nothing: slurm_node.py)."""
        t.requeues += 1
        t.ran, t.ended_at = False, None
        (t.folder / "started").unlink(missing_ok=True)  # the next run writes it when it starts
        if not self.options.quiet:
            sys.stderr.write(f"slurm: job {t.job_id} was requeued (restart {t.requeues}); following it to its next "
                             "run, which resumes from its last checkpoint\n")

    def _stop_all(self, live: list[Tracked], count: int, signum: int) -> None:
        """Stop request `count`: a running job's node gets it as a file, a pending job is cancelled; the third
        cancels every job (Slurm's SIGTERM, then SIGKILL after its KillWait)."""
        pending = []
        for t in live:
            if count >= 3 or not t.ran:
                t.dequeued = t.dequeued or not t.ran
                pending.append(t.job_id)
            elif t.ended_at is None:
                from suite.results.record import write_atomic

                t.stops += 1
                try:
                    write_atomic(t.folder / f"stop.{t.stops}", str(int(signum)))
                except OSError:
                    pending.append(t.job_id)
        if pending:
            slurm_job.command("scancel", *pending)

    def _finished(self, t: Tracked) -> tuple[bool, Outcome | None]:
        """(ended, its Outcome): (False, None) while it runs; (True, None): it never ran (cancelled while pending)."""
        from suite.results import dead_runs
        from suite.results import record as results

        report = t.folder / "outcome"
        if report.exists():
            try:
                reply = json.loads(report.read_text(encoding="utf-8"))
                result = results.parse_result(reply["result"], f"{report}")
            except (OSError, ValueError, KeyError, results.ResultError):
                reply = None
            if reply is not None:
                path = Path(reply["path"]) if reply.get("path") else None
                return True, Outcome(result, path, reply.get("signalled"), reply.get("data_missing"),
                                     reply.get("rc") or 0, reply.get("write_error"), reply.get("recorded_by"))
        if t.ended_at is None:
            return False, None
        if t.dequeued and not t.ran and not (t.folder / "started").exists():
            return True, None  # cancelled before it started: like a run a local launcher never started
        if time.monotonic() - t.ended_at < self.cfg.outcome_grace_s:
            return False, None  # its node may still be writing, or the shared filesystem showing, the report
        found = dead_runs.find_by_run_id(t.req.results_dir, t.run_id)
        if found is not None:  # the child recorded it, its node-side parent died before the report
            return True, Outcome(found[1], found[0], None)
        state = slurm_job.job_state(t.job_id)
        why = state.describe(t.job_id) if state else f"slurm: job {t.job_id} ended; neither sacct nor scontrol knows how"
        status = "interrupted" if state and state.state in slurm_job.INTERRUPTED else "error"
        if state and state.state in FAILED:
            status = "error"
        tail = self._tail(t)
        error = (f"{why}; the job ended without a report from its node (the node, or every process of the job, "
                 f"was gone before the run could be recorded)" + (f"\nlast output of the job:\n{tail}" if tail else ""))
        return True, self._fallback_new(t.req, t.run_id, error, status)

    def _log(self, t: Tracked) -> Path:
        return t.folder / f"slurm-{t.job_id}.out"

    def _pump(self, t: Tracked) -> None:
        """The job's new output to our stderr (progress lines), as the local launchers copy their children's."""
        try:
            with open(self._log(t), "rb") as f:
                f.seek(t.log_pos)
                data = f.read()
        except OSError:
            return
        cut = data.rfind(b"\n") + 1
        if not cut:
            return
        t.log_pos += cut
        if not self.options.quiet:
            try:
                sys.stderr.buffer.write(data[:cut])
                sys.stderr.flush()
            except (OSError, ValueError, AttributeError):
                pass

    def _tail(self, t: Tracked, chars: int = 3000) -> str:
        try:
            return self._log(t).read_text(encoding="utf-8", errors="replace").strip()[-chars:]
        except OSError:
            return ""

