"""A throw-away git repository of this project's code over N commits for `trainbench bisect`'s tests: commit 0 is
the project as it is, each later commit changes a text file, except those in `slow_at`, which add a layer to the
CNN that sleeps (or spins) that many seconds per forward: a slower step without a spec change. Slow layers stack,
so two of them in the range make two changes (tests/support/ab_repo.py makes the two-commit A/B repository)."""

from __future__ import annotations

from pathlib import Path

from support.ab_repo import SLEEP_LAYER, SPIN_LAYER, _git, make_repo

ANCHOR = "    return nn.Sequential("


def make_range_repo(where: Path, n: int, slow_at: dict[int, float], spin: bool = False) -> tuple[Path, list[str]]:
    """(repo, the n shas oldest first)."""
    repo, base, _ = make_repo(where, None)  # base, then a text-only commit: both the same code
    shas = [base, _git(repo, "rev-parse", "HEAD")]
    cnn = repo / "suite" / "models" / "cnn.py"
    if cnn.read_text().count(ANCHOR) != 1:
        raise RuntimeError(f"bisect_repo: no single {ANCHOR!r} in {cnn} to add a slow layer to")
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
