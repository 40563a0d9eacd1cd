"""Generated small Python repositories, each with a one-line bug and a failing test: the CPU tier of agentic RL
(task agentic_grpo). A task's repository has `m.py`, a few assignments `name=digit`, one of them wrong, and
`test_m.py`, which imports m, prints `pass` or `fail NAME=VALUE` (the first wrong name and the value it expects)
and exits 1 on a failure. The tools the policy calls are in suite/workloads/agentic/bugfix.py. Every task a seed
draws is the same on every machine; the held-out tasks (their own seed) are never drawn for training.

Text is tokenised one character a token over a small vocabulary (unknown characters -> `?`); a newline ends an
action (the stop token).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from suite.data.rl.bugfix_repos_config import NAMES, Config
from suite.registry import Component

PAD, EOS = "<pad>", "<eos>"
CHARS = string.ascii_lowercase + string.digits + " .=\n?"
VOCAB: tuple[str, ...] = (PAD, EOS, *CHARS)
PROMPT = "fix m.py\n"


@dataclass(frozen=True)
class Task:
    names: tuple[str, ...]
    values: tuple[int, ...]  # the correct values
    bug_line: int  # 0-based line of the wrong value
    bug_value: int

    def module_text(self) -> str:
        vals = [self.bug_value if i == self.bug_line else v for i, v in enumerate(self.values)]
        return "".join(f"{n}={v}\n" for n, v in zip(self.names, vals, strict=True))

    def test_text(self) -> str:
        want = ", ".join(f"({n!r}, {v})" for n, v in zip(self.names, self.values, strict=True))
        return ("import m\n"
                f"bad = [n + '=' + str(v) for n, v in ({want},) if getattr(m, n, None) != v]\n"
                "print('fail ' + bad[0] if bad else 'pass')\n"
                "raise SystemExit(1 if bad else 0)\n")

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "m.py").write_text(self.module_text())
        (folder / "test_m.py").write_text(self.test_text())
        return folder

    def fix(self) -> str:
        """The expert's edit action."""
        return f"edit {self.bug_line + 1} {self.names[self.bug_line]}={self.values[self.bug_line]}"


def listing(text: str) -> str:
    """The `cat` tool's output: each line of the file numbered from 1."""
    return "".join(f"{i} {line}\n" for i, line in enumerate(text.splitlines(), start=1))


@dataclass
class Repos:
    cfg: Config
    held_out: list[Task]

    vocab_size = len(VOCAB)
    pad_id = VOCAB.index(PAD)
    eos_id = VOCAB.index(EOS)
    stop_ids = [VOCAB.index("\n"), VOCAB.index(EOS)]

    def meta(self) -> dict[str, Any]:
        return {"vocab_size": self.vocab_size}

    def encode(self, text: str) -> list[int]:
        unknown = VOCAB.index("?")
        return [VOCAB.index(c) if c in CHARS else unknown for c in text]

    def decode(self, ids: Any) -> str:
        return "".join(VOCAB[i] if i >= 2 else "" for i in ids)

    def draw_task(self, rng: np.random.Generator) -> Task:
        while True:
            t = _task(rng, self.cfg.lines)
            if t not in self._held:
                return t

    def draw(self, rng: np.random.Generator, n: int) -> list[Task]:
        return [self.draw_task(rng) for _ in range(n)]

    @property
    def _held(self) -> set[Task]:
        if not hasattr(self, "_held_set"):
            self._held_set = set(self.held_out)
        return self._held_set

    def expert(self, task: Task) -> list[tuple[str, str]]:
        """The expert's (action, observation) turns, the observations as the tools print them."""
        return [("cat\n", listing(task.module_text())), ("test\n", f"fail {task.names[task.bug_line]}="
                                                                   f"{task.values[task.bug_line]}\n"),
                (task.fix() + "\n", "ok\n"), ("submit\n", "")]

    def expert_ids(self, task: Task) -> tuple[list[int], list[int]]:
        """(tokens, 1 on the expert's action tokens) of a whole solved episode: the warm start's data."""
        ids, mask = self.encode(PROMPT), [0] * len(PROMPT)
        for action, obs in self.expert(task):
            ids += self.encode(action)
            mask += [1] * len(action)
            ids += self.encode(obs)
            mask += [0] * len(obs)
        return ids, mask

    def demo_ids(self, task: Task, rng: np.random.Generator) -> tuple[list[int], list[int]]:
        """A warm-start episode: the expert's, or with probability `lazy_demos` a lazy one (`cat`, then `submit`:
        it reads the file and leaves the bug), right-padded (mask 0) to the expert's length so that a batch stacks.
        `rng` is drawn from only when lazy_demos > 0."""
        expert = self.expert_ids(task)
        if self.cfg.lazy_demos <= 0 or rng.random() >= self.cfg.lazy_demos:
            return expert
        ids, mask = self.encode(PROMPT), [0] * len(PROMPT)
        for action, obs in (("cat\n", listing(task.module_text())), ("submit\n", "")):
            ids += self.encode(action) + self.encode(obs)
            mask += [1] * len(action) + [0] * len(obs)
        pad = len(expert[0]) - len(ids)
        return ids + [self.pad_id] * pad, mask + [0] * pad

    @property
    def train_size(self) -> int:
        import math

        k = self.cfg.lines
        return math.perm(len(NAMES), k) * 10**k * 9 * k - len(self.held_out)


def _task(rng: np.random.Generator, lines: int) -> Task:
    names = tuple(str(c) for c in rng.choice(list(NAMES), size=lines, replace=False))
    values = tuple(int(v) for v in rng.integers(0, 10, size=lines))
    bug_line = int(rng.integers(0, lines))
    bug_value = int((values[bug_line] + rng.integers(1, 10)) % 10)
    return Task(names, values, bug_line, bug_value)


def load(cfg: Config, ctx: Any = None) -> Repos:
    rng = np.random.default_rng(cfg.eval_seed)
    held: list[Task] = []
    while len(held) < cfg.eval_tasks:
        t = _task(rng, cfg.lines)
        if t not in held:
            held.append(t)
    return Repos(cfg, held)


COMPONENT = Component(Config, load=load)
