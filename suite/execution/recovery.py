"""A job's checkpoints and its recovery from a failed rank, for the harness's loop (suite/harness.py calls these at
fixed points): when to save, what a save holds beside the model (suite/backends/resume.py writes it), the restore of a
restarted attempt (state, data order, RNG, counters, the job's clock) and the record of what the failure cost.

The clock of a restarted job is the job's: MLPerf's clock started by the first attempt, never paused, so time to
target holds the failure, the restart and the work redone. The wall-clock account carries the earlier attempts'
parts up to their last checkpoint, the work lost after it (`lost_s`) and the gap until this process started
(`recovery_s`); docs/metrics.md defines them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite import distributed
from suite.backends import resume
from suite.execution import faults
from suite.results.record import EvalPoint


@dataclass
class JobState:
    """What one attempt knows of its job: its checkpointer, the restarts so far, the job's clock."""

    ckpt: resume.Checkpointer | None = None
    events: list[dict[str, Any]] = field(default_factory=list)  # one per restart: what it cost
    pending: dict[str, Any] | None = None  # this attempt's restart event, until its first step is done
    progress_fd: int | None = None  # where this rank writes how far it got (progress_file)
    run_start_epoch: float | None = None  # Unix time of the job's run_start (its first attempt's)


def checkpointer(run: Any, backend: Any) -> resume.Checkpointer | None:
    """A checkpointer when the spec (or --checkpoint-every) asks for checkpoints or this is a restarted job."""
    if run.spec.checkpoint is None and faults.attempt() == 0:
        return None
    if backend.checkpoint_format is None:
        raise ValueError(f"checkpoint: the {run.req.backend} backend cannot save checkpoints here (the torch "
                         "backend can, with torch.distributed.checkpoint; deepspeed, torchtitan and megatron with their own)")
    if run.req.mode != "tta":
        raise ValueError("checkpoint: throughput mode measures steps, not a job; run --mode tta")
    root = run.req.checkpoint_dir or resume.default_root(run.run_id)
    return resume.Checkpointer(run.spec.checkpoint, root, run.dist.rank, run.dist.world, backend.checkpoint_format)

def progress_file(run: Any, ckpt: resume.Checkpointer | None) -> None:
    """Open where this rank writes how far it got (step, Unix time) after every step: a failed attempt's steps lost."""
    if ckpt is None or ckpt.spec is None:
        return
    ckpt.root.mkdir(parents=True, exist_ok=True)
    run.job.progress_fd = os.open(ckpt.root / f"progress-rank{run.dist.rank}", os.O_WRONLY | os.O_CREAT, 0o644)


def after_step(run: Any, ckpt: resume.Checkpointer, going_on: bool, backend: Any, state: Any) -> None:
    """At the end of a step's iteration: the progress mark, the end of a recovery, a checkpoint when due."""
    if run.job.progress_fd is not None:
        os.pwrite(run.job.progress_fd, f"{run.steps} {time.time():.6f}".ljust(40).encode(), 0)
    if run.job.pending is not None:  # time to recover: from the failure to the first productive step
        run.job.pending["time_to_recover_s"] = time.time() - run.job.pending["failed_at"]
        run.job.pending = None
    due = going_on and ckpt.due(run.steps, time.perf_counter())
    if ckpt.spec is not None and ckpt.spec.every_s and run.dist.world > 1:  # time-based: rank 0's clock decides
        due = bool(distributed.all_max(int(due) if run.dist.is_main else 0))
    if due:
        save(run, ckpt, backend, state)


def end(run: Any, ckpt: resume.Checkpointer, finished: bool) -> None:
    """The clock stops: a run that finished waits for its save in flight (an exception leaves it, as a failed node
    would); the progress mark is closed."""
    if finished:
        run.account.lap("checkpoint_save_s", run.account.cursor + ckpt.wait())
    if run.job.progress_fd is not None:
        os.close(run.job.progress_fd)
        run.job.progress_fd = None


def account_record(run: Any) -> dict[str, Any]:
    """The wall-clock account, closed now (what is left since its last lap is teardown, or init in a run that never
    started its clock), with the checkpoints saved and the recoveries."""
    if run.account.closed is None:
        run.account.lap("teardown_s" if run.t0 is not None else "init_s")
    record = run.account.close(run.account.cursor).as_record()
    record["checkpoint"] = run.job.ckpt.record() if run.job.ckpt is not None else {}
    record["recovery"] = recovery_record(run)
    record["ranks"] = run.rank_summary
    return record

def save(run: Any, ckpt: resume.Checkpointer, backend: Any, state: Any) -> None:
    """Save a checkpoint at the end of a step's iteration: the state, and beside it what a restart needs to carry on
    (counters, curve, RNG, the wall-clock account so far)."""
    acc = run.account
    with acc.timed("checkpoint_save_s"):
        t = time.perf_counter()
        snap = acc.compute(t)
        snap.parts_s["steps_s"] += t - acc.cursor - acc.side_s  # since the last step's end (nothing, at its end)
        extra = {"steps": run.steps, "samples": run.samples, "curve": [p.model_dump() for p in run.curve],
                 "eval_s": run.eval_s, "data_wait_s": run.data_wait_s, "step_times": run.step_times,
                 "losses": run.losses, "last_loss": run.last_loss, "rng": resume.rng_state(),
                 "backend": backend.step_state(state), "run_start_epoch": run.job.run_start_epoch,
                 "saved_epoch": time.time(), "account": snap.parts_s, "account_wall_s": snap.wall_s,
                 "recoveries": run.job.events}
        if ckpt.format == resume.FORMAT:
            ckpt.save(run.steps, backend.checkpoint_state(state), extra)
        else:  # the engine's own format (DeepSpeed's save_checkpoint, ...)
            ckpt.save(run.steps, None, extra, own=lambda folder: backend.save_checkpoint(state, folder))


def restore(run: Any, found: tuple[int, Path], backend: Any, state: Any, batches: Any) -> float:
    """Load the newest complete checkpoint, replay the data to its step, set the RNG; returns the job's t0."""
    ckpt = run.job.ckpt
    assert ckpt is not None
    step, folder = found
    t_restore = time.perf_counter()
    if ckpt.format == resume.FORMAT:
        app_state = backend.checkpoint_state(state)
        extra = ckpt.load(app_state, folder)
        backend.load_checkpoint_state(state, app_state)
    else:
        extra = ckpt.load(None, folder, own=lambda f: backend.load_checkpoint(state, f))
    backend.load_step_state(state, extra["backend"])
    resume.replay(batches, step)  # the data order, then the RNG (a reader may draw from it)
    resume.set_rng_state(extra["rng"])
    ckpt.restored_step = step
    run.steps, run.samples = extra["steps"], extra["samples"]
    run.curve = [EvalPoint.model_validate(p) for p in extra["curve"]]
    run.eval_s, run.data_wait_s = extra["eval_s"], extra["data_wait_s"]
    run.step_times, run.losses, run.last_loss = extra["step_times"], extra["losses"], extra["last_loss"]
    now = time.perf_counter()
    run.account.lap("checkpoint_restore_s", now)
    # where the failed attempt got to: the newest progress mark of any rank
    marks = []
    for f in ckpt.root.glob("progress-rank*"):
        try:
            got, when = f.read_text().split()
            marks.append((int(got), float(when)))
        except (OSError, ValueError):
            continue
    failed_step, failed_at = max(marks) if marks else (step, extra["saved_epoch"])
    failed_at = max(failed_at, extra["saved_epoch"])
    start_epoch = run.account.epoch_of(run.account.start_boot())
    lost_s, recovery_s = failed_at - extra["saved_epoch"], max(0.0, start_epoch - failed_at)
    run.account.carry(extra["account"], extra["account_wall_s"], lost_s, recovery_s)
    event = {"attempt": faults.attempt(), "failed_at_step": failed_step, "restored_step": step,
             "steps_lost": max(0, failed_step - step), "lost_s": lost_s, "recovery_s": recovery_s,
             "failed_at": failed_at, "restore_s": now - t_restore,
             "cause": "slurm requeue" if os.environ.get(faults.SLURM_RESTART_ENV) else "restart"}
    run.job.events = [*extra.get("recoveries", []), event]
    run.job.pending = event  # time to recover ends at this attempt's first productive step
    run.job.run_start_epoch = extra["run_start_epoch"]
    run.warnings.append(f"resumed from the checkpoint of step {step} after a failure at step {failed_step} "
                         f"(attempt {faults.attempt()}): the clock is the job's, never paused; not an MLPerf-"
                         "compliant run")
    return now - (time.time() - run.job.run_start_epoch)


def recovery_record(run: Any) -> dict[str, Any]:
    events = run.job.events
    if not events:
        return {}
    return {"restarts": len(events), "steps_lost": sum(e["steps_lost"] for e in events),
            "time_to_recover_s": [e.get("time_to_recover_s") for e in events], "events": events}
