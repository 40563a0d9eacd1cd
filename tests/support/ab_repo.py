"""A throw-away git repository holding this project's code at two commits, for the A/B gate's tests and
benchmarks/gate_power.py: `base`, and a `head` that either sleeps in the model's forward (the CNN's and the GPT's, so
`cv/digits_cnn` and `nlp/topics_gpt` both slow down: a slower step without a spec change), or spins there (burns
that much CPU time: more work, as a real code regression costs), or changes nothing but a text file (identical
code)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("suite", "workloads", "pyproject.toml", "constraints")
SLEEP_LAYER = '''

class _InjectedSleep(nn.Module):
    """A slower step with the same spec: the A/B gate's test regression."""

    def forward(self, x):
        import time

        time.sleep({seconds!r})
        return x
'''
SPIN_LAYER = '''

class _InjectedSleep(nn.Module):
    """A step with more CPU work and the same spec: busy for a fixed CPU time, whatever the machine's load."""

    def forward(self, x):
        import time

        t = time.process_time()
        while time.process_time() - t < {seconds!r}:
            pass
        return x
'''


# where head's slow layer goes: (module under suite/models, the line, the line with the layer in it)
INJECT_AT = (
    ("cnn.py", "    return nn.Sequential(*mods)", "    return nn.Sequential(_InjectedSleep(), *mods)"),
    ("gpt.py", "        x = self.wte(idx) + self.wpe(pos)\n",
     "        x = _InjectedSleep()(self.wte(idx) + self.wpe(pos))\n"),
)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def make_repo(where: Path, slow_s: float | None, spin: bool = False) -> tuple[Path, str, str]:
    """(repo, base sha, head sha). slow_s: the sleep (spin: the busy CPU time) per forward in head; None: head
    changes only a text file."""
    repo = where / "repo"
    repo.mkdir(parents=True)
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, repo / name)
    (repo / "README.md").write_text("A/B test repository\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "ab@example.invalid")
    _git(repo, "config", "user.name", "ab test")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    if slow_s is None:
        (repo / "README.md").write_text("A/B test repository, same code\n")
    else:
        layer = (SPIN_LAYER if spin else SLEEP_LAYER).format(seconds=slow_s)
        for module, before, after in INJECT_AT:
            path = repo / "suite" / "models" / module
            text = path.read_text()
            if text.count(before) != 1:  # the model changed shape: a head that is not slower would pass as A/A
                raise RuntimeError(f"ab_repo: cannot inject the slow layer into {path} (no single {before!r})")
            path.write_text(text.replace(before, after) + layer)
    _git(repo, "commit", "-q", "-am", "head")
    return repo, base, _git(repo, "rev-parse", "HEAD")
