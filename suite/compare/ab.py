"""A/B on one runner: both commits checked out side by side, each in its own environment, run in alternating
blocks (AB BA AB ... or a seeded random order) so that drift and noisy neighbours hit both sides alike.

Layout under `out`: `src/base`, `src/head` (git worktrees), `env/base`, `env/head` (one venv each, one shared
pip cache), `base/` and `head/` (each side's results folder), `ab.json` (what ran, in which order, how long).
`trainbench compare --baseline out/base --candidate out/head` decides (docs/compare.md).
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from suite.compare.ab_checkout import prepare
from suite.compare.ab_plan import SIDES, ABError, ABPlan, Block, Side
from suite.compare.ab_signals import sigterm_unwinds

HEARTBEAT_S = 20.0  # a round runs minutes: say it is still running this often (issue 49: two silent minutes a round)


def order_of(rounds: int, order: str, seed: int) -> list[tuple[int, str]]:
    """(round, side) blocks. `alternate` counterbalances: AB, BA, AB, ... so neither side always goes first."""
    if order not in ("alternate", "random"):
        raise ABError(f"--order {order!r}: expected alternate or random")
    rng = random.Random(seed)
    blocks: list[tuple[int, str]] = []
    for r in range(rounds):
        first_base = (r % 2 == 0) if order == "alternate" else rng.random() < 0.5
        pair = SIDES if first_base else SIDES[::-1]
        blocks += [(r, s) for s in pair]
    return blocks


def _command(side: Side, plan: ABPlan, round_: int) -> tuple[list[str], dict[str, str]]:
    results = (plan.out / side.name).resolve()
    cmd = [str(side.python), "-m", "suite.cli", "run", *plan.run_flags(results, round_).argv()]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{side.python.parent}{os.pathsep}{env.get('PATH', '')}"
    return cmd, env


def _refused(side: Side, code: int, stderr: str) -> None:
    if code == 2:  # bad input: the same on every block, so stop now with the run's own message
        raise ABError(f"{side.name} ({side.sha[:12]}): `trainbench run` refused: {stderr.strip()[-2000:]}",
                      side=side.name)


BLOCK_TIMEOUT_S = 7200
STOP_GRACE_S = 10.0  # a side stopped by the driver's own end: this long to record `interrupted`, then killed


def log_path(plan: ABPlan, side: Side, round_: int) -> Path:
    """Where a block's output goes (a file, never a pipe: a pipe nobody reads stalls the side that fills it)."""
    return (plan.out / "logs" / f"{side.name}-r{round_}.log").resolve()


def output_tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


def _start(side: Side, plan: ABPlan, round_: int, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    cmd, env = _command(side, plan, round_)
    path = log_path(plan, side, round_)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as log:  # the child holds its own copy of the descriptor
        return subprocess.Popen(cmd, cwd=side.src, env={**env, **(extra_env or {})}, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT)


def _stop(procs: Sequence[subprocess.Popen]) -> None:
    """The driver is ending (an error, Ctrl-C, SIGTERM): every side still running is asked to stop (SIGTERM: it
    records `interrupted` after its step), then its whole tree killed; nothing outlives the driver."""
    from suite.execution.processes import descendants, kill_tree

    running = [p for p in procs if p.poll() is None]
    for p in running:
        for pid in [p.pid, *descendants(p.pid)]:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
    end = time.monotonic() + STOP_GRACE_S
    for p in running:
        try:
            p.wait(max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_tree(p.pid)
            p.wait()


def run_block(side: Side, plan: ABPlan, round_: int) -> Block:
    """One `trainbench run --mode throughput` of every workload, from the side's own checkout and venv."""
    t = time.perf_counter()
    proc = _start(side, plan, round_)
    try:
        proc.wait(BLOCK_TIMEOUT_S)
    finally:
        _stop([proc])
    _refused(side, proc.returncode, output_tail(log_path(plan, side, round_)))
    return Block(round_, side.name, time.perf_counter() - t, proc.returncode)


def run_lockstep(first: Side, second: Side, plan: ABPlan, round_: int,
                 log: Callable[[str], None] = lambda _: None) -> list[Block]:
    """Both sides at once, alternating step by step through two FIFOs; `first` takes the first step.

    When one side ends (a crash, a commit that does not import) the other would wait for a token that never
    comes, long enough for its watchdog to record it as hung: the driver then passes the survivor's tokens back
    to it at once (one more in case the dead side held it), so it measures on alone and its result stands; the
    failure is the dead side's block's (issue 50 item 4). The relay speaks only the FIFOs, so an older commit's
    side (any version of suite/throughput.py's Turns) is served the same way."""
    from suite.throughput import TURN_ENV

    turn_dir = Path(tempfile.mkdtemp(prefix="ab-turns-"))
    fifos = [turn_dir / "a", turn_dir / "b"]
    for f in fifos:
        os.mkfifo(f, 0o600)
    holder = [os.open(f, os.O_RDWR | os.O_NONBLOCK) for f in fifos]  # kept open: a FIFO without a holder loses its token
    procs: list[tuple[Side, subprocess.Popen]] = []
    try:
        os.write(holder[0], b"t")  # the first side's token
        t = time.perf_counter()
        for i, side in enumerate((first, second)):  # side i waits on fifos[i] and passes the token to the other
            procs.append((side, _start(side, plan, round_, {TURN_ENV: f"{fifos[i]}:{fifos[1 - i]}"})))
        ended: dict[int, float] = {}
        relay = select.poll()
        deadline = time.monotonic() + BLOCK_TIMEOUT_S
        while len(ended) < 2 and time.monotonic() < deadline:
            for i, (side, proc) in enumerate(procs):
                if i not in ended and proc.poll() is not None:
                    ended[i] = time.perf_counter() - t
                    if len(ended) == 1 and proc.returncode != 0:
                        log(f"{side.name} ({side.sha[:12]}) ended with exit {proc.returncode} in round {round_ + 1}; "
                            f"{procs[1 - i][0].name} measures on alone")
                    if len(ended) == 1:  # serve the survivor: its own tokens back, and one in case this side held it
                        alone = 1 - i
                        relay.register(holder[i], select.POLLIN)
                        os.write(holder[alone], b"t")
            if len(ended) == 1:
                alone = 1 - next(iter(ended))
                if relay.poll(50):
                    try:
                        os.write(holder[alone], os.read(holder[1 - alone], 64))
                    except BlockingIOError:
                        pass
            else:
                time.sleep(0.05)
        blocks = []
        for i, (side, proc) in enumerate(procs):
            if i not in ended:
                raise ABError(f"{side.name} ({side.sha[:12]}): its run passed {BLOCK_TIMEOUT_S} s", side=side.name)
            _refused(side, proc.returncode, output_tail(log_path(plan, side, round_)))
            blocks.append(Block(round_, side.name, ended[i], proc.returncode))
        return blocks
    finally:
        _stop([proc for _, proc in procs])
        for fd in holder:
            os.close(fd)
        shutil.rmtree(turn_dir, ignore_errors=True)


@contextmanager
def progress(log: Callable[[str], None], label: str, every_s: float | None = None) -> Iterator[None]:
    """`label: started`, then `label: still running, N s` every `every_s` until the block ends."""
    every_s = HEARTBEAT_S if every_s is None else every_s
    done, t0 = threading.Event(), time.perf_counter()

    def beat() -> None:
        while not done.wait(every_s):
            log(f"{label}: still running, {time.perf_counter() - t0:.0f} s")

    log(f"{label}: started")
    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def run_ab(plan: ABPlan, base: str, head: str, log: Callable[[str], None] = lambda _: None) -> dict:
    """Prepare both sides, run the blocks, write `ab.json`; returns its content."""
    with sigterm_unwinds():
        return _run_ab(plan, base, head, log)


@contextmanager
def out_lock(out: Path) -> Iterator[None]:
    """One A/B at a time in a folder: an exclusive lock on `out/.ab.lock` held for the whole A/B (the kernel drops it
    when the holder dies, so a killed A/B never blocks the next). Two A/Bs given one --out would otherwise both pass
    the "already holds results" check and pool their seeds (issue 50 item 5)."""
    import fcntl

    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / ".ab.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise ABError(f"--out {out}: cannot make the working folder ({e.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
            raise ABError(f"--out {out}: another `trainbench ab` is working there now (pid {holder or '?'}); give "
                          "each A/B a --out of its own") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


def _run_ab(plan: ABPlan, base: str, head: str, log: Callable[[str], None]) -> dict:
    if plan.runs_per_block < 1:
        raise ABError(f"--runs-per-block {plan.runs_per_block}: need at least 1")
    if plan.rounds < 1:
        raise ABError(f"--rounds {plan.rounds}: need at least 1 (compare needs 4 runs a side)")
    if not plan.workloads:
        raise ABError("--workloads: name at least one workload (e.g. cv/digits_cnn)")
    order_of(plan.rounds, plan.order, plan.seed)  # a bad --order refused before any worktree or venv is made
    with out_lock(plan.out):
        return _run_locked(plan, base, head, log)


def _run_locked(plan: ABPlan, base: str, head: str, log: Callable[[str], None]) -> dict:
    for name in SIDES:  # results of an earlier A/B would be compared with this one's as if they were one
        earlier = next((p for p in (plan.out / name).rglob("*.json")), None) if (plan.out / name).is_dir() else None
        if earlier is not None:
            raise ABError(f"--out {plan.out}: {plan.out / name} already holds results of an earlier A/B (e.g. "
                          f"{earlier}); nothing is overwritten: give a new --out, or move that folder away")
    plan.out.mkdir(parents=True, exist_ok=True)
    sides = {s.name: s for s in prepare(plan, base, head, log)}
    blocks: list[Block] = []
    schedule = order_of(plan.rounds, plan.order, plan.seed)
    if plan.lockstep:
        for i in range(0, len(schedule), 2):
            (round_, a), (_, b) = schedule[i], schedule[i + 1]
            with progress(log, f"round {round_ + 1}/{plan.rounds} {a}+{b} in lockstep"):
                done = run_lockstep(sides[a], sides[b], plan, round_, log)
            log(f"round {round_ + 1}/{plan.rounds} {a}+{b} in lockstep: {done[-1].seconds:.1f} s, exit "
                f"{[x.exit_code for x in done]}")
            blocks += done
    else:
        for round_, name in schedule:
            with progress(log, f"round {round_ + 1}/{plan.rounds} {name}"):
                block = run_block(sides[name], plan, round_)
            log(f"round {round_ + 1}/{plan.rounds} {name}: {block.seconds:.1f} s, exit {block.exit_code}")
            blocks.append(block)
    manifest = {
        "kind": "trainbench-ab", "schema_version": 1,
        "sides": {s.name: {"ref": s.ref, "sha": s.sha, "results": str((plan.out / s.name).resolve())}
                  for s in sides.values()},
        "same_commit": sides["base"].sha == sides["head"].sha,
        "plan": {**asdict(plan), "repo": str(plan.repo), "out": str(plan.out),
                 "cache": str(plan.cache) if plan.cache else None},
        "blocks": [asdict(b) for b in blocks],
    }
    (plan.out / "ab.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def clean(plan_out: Path, repo: Path, sides: Sequence[str] = SIDES) -> None:
    """Remove the worktrees (the results and ab.json stay)."""
    for name in sides:
        src = plan_out / "src" / name
        if src.exists():
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(src)], capture_output=True)
    shutil.rmtree(plan_out / "src", ignore_errors=True)
