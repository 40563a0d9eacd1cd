"""What `trainbench run` was asked to do, as ONE typed object: every flag of `run`, with its default.

`run` builds it from its flags; `study` from the flags it shares with `run` (how to launch, where results go); `ab`
and `bisect` describe each block's `trainbench run` with one and write it back as flags (`argv`). The checks that
need nothing but the values (`check`) live here; the ones that need the registry or the machine stay with the
planner and the launcher. Pure: it imports no suite module, so every layer may hold one. (A backend is handed
fewer choices: suite/backends/base.py RunOptions.)

May import: no other suite module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

MODES = ("tta", "throughput")
ATTENTION_FLOPS = ("full", "causal")
MLPERF_DIVISIONS = ("open", "closed")


@dataclass(frozen=True)
class RunFlags:
    workloads: list[str] = field(default_factory=list)  # names (cv/digits_cnn) or spec paths
    tier: str | None = None
    backend: str = "torch"
    seeds: int = 1
    seed: int = 0  # the first seed
    sets: list[str] = field(default_factory=list)  # --set KEY=VALUE spec overrides
    variant: str | None = None
    precision: str | None = None
    compile: bool | None = None
    threads: int | None = None
    nproc: int = 1
    results: Path = Path("results")
    json: bool = False
    quiet: bool = False
    fail_fast: bool = False
    executor: str = "inline"
    jobs: int = 1
    address: str | None = None
    profile: bool = False
    profile_dir: Path = Path("profiles")
    nvtx: bool = False
    peak_tflops: float | None = None
    attention_flops: str = "full"
    mlperf_org: str | None = None
    mlperf_division: str = "open"
    algo: str | None = None
    mode: str = "tta"
    isolate: bool = True
    parallel: str | None = None
    ac: str | None = None
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    slurm: list[str] = field(default_factory=list)
    checkpoint_every: str | None = None
    max_restarts: int = 0

    def check(self) -> None:
        """The checks of values alone; ValueError naming the flag."""
        if self.mode not in MODES:
            raise ValueError(f"--mode {self.mode!r}: expected tta or throughput")
        if self.peak_tflops is not None and not self.peak_tflops > 0:
            raise ValueError(f"--peak-tflops {self.peak_tflops}: must be a positive number of TFLOP/s per device")
        if self.attention_flops not in ATTENTION_FLOPS:
            raise ValueError(f"--attention-flops {self.attention_flops!r}: expected full or causal")
        if self.mlperf_division not in MLPERF_DIVISIONS:
            raise ValueError(f"--mlperf-division {self.mlperf_division!r}: expected open or closed")
        if self.mlperf_org is not None and not self.mlperf_org.strip():
            raise ValueError("--mlperf-org: give the submitting organisation's name (not empty)")

    @property
    def seed_range(self) -> range:
        return range(self.seed, self.seed + self.seeds)

    def argv(self) -> list[str]:
        """These options as `trainbench run` flags: the workloads, what a child run always states (mode, backend,
        seeds, results), then every other flag that differs from its default."""
        out = [*self.workloads, "--mode", self.mode, "--backend", self.backend, "--seed", str(self.seed),
               "--seeds", str(self.seeds), "--results", str(self.results)]
        default = RunFlags()
        out += ["--quiet"] if self.quiet else []
        out += ["--no-isolate"] if not self.isolate else []
        out += ["--threads", str(self.threads)] if self.threads is not None else []
        out += ["--nproc", str(self.nproc)] if self.nproc != default.nproc else []
        for s in self.sets:
            out += ["--set", s]
        for name, flag in (("tier", "--tier"), ("variant", "--variant"), ("precision", "--precision"),
                           ("executor", "--executor"), ("jobs", "--jobs"), ("address", "--address"),
                           ("profile_dir", "--profile-dir"), ("peak_tflops", "--peak-tflops"),
                           ("attention_flops", "--attention-flops"), ("mlperf_org", "--mlperf-org"),
                           ("mlperf_division", "--mlperf-division"), ("algo", "--algo"), ("parallel", "--parallel"),
                           ("ac", "--ac"), ("nnodes", "--nnodes"), ("node_rank", "--node-rank"),
                           ("rdzv_endpoint", "--rdzv-endpoint"), ("checkpoint_every", "--checkpoint-every"),
                           ("max_restarts", "--max-restarts")):
            value = getattr(self, name)
            if value != getattr(default, name):
                out += [flag, str(value)]
        for s in self.slurm:
            out += ["--slurm", s]
        out += ["--compile"] if self.compile else ["--no-compile"] if self.compile is False else []
        out += [f for f, on in (("--json", self.json), ("--fail-fast", self.fail_fast), ("--profile", self.profile),
                                ("--nvtx", self.nvtx)) if on]
        return out
