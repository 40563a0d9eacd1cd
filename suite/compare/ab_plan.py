"""What an A/B is asked to do (`ABPlan`: the commits' repository, the workloads, rounds, order, how the sides are
installed), its two sides as prepared, its blocks as run, and the error that stops it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from suite.run_flags import RunFlags

SIDES = ("base", "head")


class ABError(ValueError):
    """Bad input or a failed preparation (a ref that does not resolve, a failed install); exit 2. `side` names the
    side it belongs to where it is one side's own (its checkout, install or run), so bisect can skip that commit."""

    def __init__(self, message: str, side: str | None = None):
        super().__init__(message)
        self.side = side


@dataclass
class Side:
    name: str
    ref: str
    sha: str
    src: Path
    python: Path


@dataclass
class Block:
    round: int
    side: str
    seconds: float
    exit_code: int


@dataclass
class ABPlan:
    repo: Path
    out: Path
    workloads: list[str]
    rounds: int = 10
    order: str = "alternate"  # alternate: AB BA AB BA ...; random: a seeded coin per round
    seed: int = 0
    backend: str = "torch"
    threads: int | None = None
    sets: list[str] = field(default_factory=list)
    nproc: int = 1
    deps: str = "install"  # install: pip install -e each worktree; shared: this interpreter's packages
    extras: str = ""
    offline: bool = False  # install without an index: this interpreter's packages underneath, pip --no-index
    find_links: list[str] = field(default_factory=list)  # wheel folders pip may install from (pip --find-links)
    lockstep: bool = True  # both sides' processes at once, alternating step by step (suite/throughput.py: Turns)
    runs_per_block: int = 1  # runs (seeds) per process: amortises the interpreter's start-up on a slow machine
    mode: str = "throughput"  # tta: seeds to the target (`trainbench bisect --metric time_to_target`)
    cache: Path | None = None  # one worktree and venv per commit under cache/<sha>, shared by many A/Bs (bisect)

    def run_flags(self, results: Path, round_: int) -> RunFlags:
        """One block's `trainbench run`: this round's seeds, quiet, in the block's own process (no isolation)."""
        return RunFlags(workloads=list(self.workloads), mode=self.mode, backend=self.backend,
                          seed=round_ * self.runs_per_block, seeds=self.runs_per_block, results=results, quiet=True,
                          isolate=False, threads=self.threads, nproc=self.nproc, sets=list(self.sets))
