"""The CPU tier's environment: fix a one-line bug in a generated repository (suite/data/rl/bugfix_repos.py) with
tools that run in a sandbox (suite/workloads/agentic/sandbox.py).

Actions, one line each: `cat` (m.py with numbered lines, read through the sandbox's confined file tool), `test`
(runs `python test_m.py` in the sandbox: its output), `edit N TEXT` (replaces line N of m.py), `submit` (ends the
episode); anything else is answered `?`. The reward is the tests' verdict on the final repository: the pristine
test file is written back and run once more in the sandbox, 1.0 when it exits 0.
"""

from __future__ import annotations

from suite.data.rl.bugfix_repos import PROMPT, Task, listing
from suite.workloads.agentic.env import StepResult
from suite.workloads.agentic.sandbox import Limits, PathEscape, Sandbox, python_for_commands

FLAGS = ["-E", "-S", "-s", "-B"]  # no site, no environment, no .pyc (an edit within the second would run the stale one)


class BugFixEnv:
    def __init__(self, task: Task, limits: Limits, parent: str | None = None):
        self.task, self.limits, self.parent = task, limits, parent
        self.box: Sandbox | None = None
        self.tool_runs = 0

    def reset(self) -> str:
        self.close()
        self.box = Sandbox(None, self.limits, self.parent)
        self.task.write(self.box.folder)
        if self.box.root_mode:  # the copy belongs to the sandbox's uid
            import os

            for p in self.box.folder.iterdir():
                os.lchown(p, self.box.uid, self.box.uid)
        return PROMPT

    def step(self, action: str) -> StepResult:
        assert self.box is not None, "reset() first"
        words = action.strip().split(" ", 2)
        if words == ["submit"]:
            return StepResult("", True, "submit")
        if words == ["cat"]:
            try:
                return StepResult(listing(self.box.read_text("m.py")), False, "cat")
            except (PathEscape, OSError) as e:
                return StepResult("?\n", False, "cat", reason="path_escape" if isinstance(e, PathEscape) else "os_error")
        if words == ["test"]:
            r = self.box.run([python_for_commands(), *FLAGS, "test_m.py"])
            self.tool_runs += 1
            return StepResult(r.output if r.output.endswith("\n") else r.output + "\n", False, "test", r.wall_s,
                              r.reason)
        if len(words) == 3 and words[0] == "edit" and words[1].isdigit():
            return self._edit(int(words[1]), words[2])
        return StepResult("?\n", False, None, reason="bad_action")

    def _edit(self, line: int, text: str) -> StepResult:
        assert self.box is not None
        try:
            lines = self.box.read_text("m.py").splitlines()
            if not 1 <= line <= len(lines):
                return StepResult("no such line\n", False, "edit", reason="bad_line")
            lines[line - 1] = text
            self.box.write_text("m.py", "\n".join(lines) + "\n")
        except (PathEscape, OSError) as e:
            return StepResult("?\n", False, "edit", reason="path_escape" if isinstance(e, PathEscape) else "os_error")
        return StepResult("ok\n", False, "edit")

    def reward(self) -> float:
        assert self.box is not None
        self.box.write_text("test_m.py", self.task.test_text())
        r = self.box.run([python_for_commands(), *FLAGS, "test_m.py"])
        self.tool_runs += 1
        self.close()
        return 1.0 if r.returncode == 0 and r.reason == "ok" else 0.0

    def close(self) -> None:
        if self.box is not None:
            self.box.close()
            self.box = None
