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
    ("vision/cnn.py", "    return nn.Sequential(*mods)", "    return nn.Sequential(_InjectedSleep(), *mods)"),
    ("gpt/model.py", "        x = self.wte(idx) + self.wpe(pos)\n",
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
                raise RuntimeError(f"git_repo: cannot inject the slow layer into {path} (no single {before!r})")
            path.write_text(text.replace(before, after) + layer)
    _git(repo, "commit", "-q", "-am", "head")
    return repo, base, _git(repo, "rev-parse", "HEAD")


# ---- N commits for `trainbench bisect` -------------------------------------------------------------------
# A throw-away git repository of this project's code over N commits for `trainbench bisect`'s tests: commit 0 is
# the project as it is, each later commit changes a text file, except those in `slow_at`, which add a layer to the
# CNN that sleeps (or spins) that many seconds per forward: a slower step without a spec change. Slow layers stack,
# so two of them in the range make two changes (make_repo above makes the two-commit A/B repository).

ANCHOR = "    return nn.Sequential("


def make_range_repo(where: Path, n: int, slow_at: dict[int, float], spin: bool = False) -> tuple[Path, list[str]]:
    """(repo, the n shas oldest first)."""
    repo, base, _ = make_repo(where, None)  # base, then a text-only commit: both the same code
    shas = [base, _git(repo, "rev-parse", "HEAD")]
    cnn = repo / "suite" / "models" / "vision" / "cnn.py"
    if cnn.read_text().count(ANCHOR) != 1:
        raise RuntimeError(f"git_repo: no single {ANCHOR!r} in {cnn} to add a slow layer to")
    for i in range(2, n):
        if i in slow_at:
            layer = (SPIN_LAYER if spin else SLEEP_LAYER).format(seconds=slow_at[i]).replace("_InjectedSleep",
                                                                                               f"_Slow{i}")
            text = cnn.read_text().replace(ANCHOR, f"{ANCHOR}_Slow{i}(), ")
            cnn.write_text(text + layer)
        else:
            (repo / "README.md").write_text(f"bisect test repository, commit {i}\n")
        _git(repo, "commit", "-q", "-am", f"commit {i}" + (" (slower)" if i in slow_at else ""))
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas
