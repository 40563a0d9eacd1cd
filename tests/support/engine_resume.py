"""The runs an engine's own checkpoint test compares (tests/backends/test_resume_<engine>.py): one uninterrupted run,
one killed at step 25 (the kill raising in this process instead of SIGKILL, as tests/harness/test_resume.py), and a
restart that resumes from a copy of the killed attempt's checkpoints."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite import harness
from suite.specload import load_spec

KILL = {"faults.kill_rank": 0, "faults.kill_at_step": 25}


class NodeFailure(Exception):
    pass


@dataclass(frozen=True)
class EngineRecipe:
    spec: Path
    backend: str
    overrides: dict[str, Any] = field(default_factory=dict)
    variant: str | None = None

    def run(self, ckpt_dir: Path, kill_spec: bool = False, kill_now: bool = False) -> harness.Run:
        """One run checkpointing into ckpt_dir: `kill_spec` carries the kill's spec (the killed attempt and its
        restart), `kill_now` makes the kill raise here (the killed attempt only)."""
        spec = load_spec(self.spec, {**self.overrides, **(KILL if kill_spec else {})}, self.variant)
        req = harness.RunRequest(spec=spec, backend=self.backend, results_dir=None, threads=1, measure_peak=False,
                                 checkpoint_dir=ckpt_dir)
        the_run = harness.Run(req)
        if kill_now:
            def fail() -> None:
                raise NodeFailure("killed")

            the_run.faults.kill = fail
        the_run.execute()
        return the_run

    def whole_and_killed(self, tmp: Path) -> tuple[Path, harness.Run, harness.Run]:
        return tmp, self.run(tmp / "whole"), self.run(tmp / "killed", kill_spec=True, kill_now=True)

    def resume(self, tmp: Path, monkeypatch: Any, name: str) -> harness.Run:
        """The restart of the killed attempt, in a copy of its checkpoints of its own."""
        folder = tmp / name
        shutil.copytree(tmp / "killed", folder)
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
        return self.run(folder, kill_spec=True)
