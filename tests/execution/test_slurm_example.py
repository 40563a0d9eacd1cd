"""docs/recipes/slurm_example.md runs as written against the real one-node Slurm of the `slurm_cluster` fixture
(tests/support/slurm_cluster.py): its `<!-- runnable: slurm -->` block, one line a command, in a fresh folder with an
empty $TRAINBENCH_DATA and SLURM_CONF pointing at the test cluster; a line's `# exits N: why` is the exit code the page
promises. Then: the run was one Slurm job (the cluster's job completion log grew by one COMPLETED job), its result was
recorded with two ranks, and nothing is left in the queue."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time

import pytest
from support.faults import ROOT, env

from suite.results.record import load_results

PAGE = ROOT / "docs" / "recipes" / "slurm_example.md"
BLOCK = re.compile(r"<!-- runnable: slurm -->\s*```bash\n(.*?)```", re.S)


def _commands() -> list[tuple[str, int]]:
    blocks = BLOCK.findall(PAGE.read_text())
    assert len(blocks) == 1, f"{PAGE.name}: expected one `<!-- runnable: slurm -->` block"
    out = []
    for line in blocks[0].splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            expected = re.search(r"#\s*exits (\d+)", line)
            out.append((line, int(expected.group(1)) if expected else 0))
    return out


def _completed(cluster) -> int:
    log = cluster.root / "jobcomp.txt"
    return log.read_text().count("JobState=COMPLETED") if log.exists() else 0


def _dlrmv4_completed(log) -> bool:
    return log.exists() and any("dlrmv4" in line and "JobState=COMPLETED" in line for line in log.read_text().splitlines())


def test_the_page_runs_a_recipe_through_slurm_with_its_nproc_and_checks_its_log() -> None:
    lines = [line for line, _ in _commands()]
    assert any("--executor slurm" in line and "--nproc 2" in line for line in lines)
    assert any("mllog check" in line for line in lines)


@pytest.mark.timeout(960)  # above its children's 900 s guard (tests/project/test_hang_guards.py)
@pytest.mark.slow
def test_the_slurm_example_page_runs_as_written(slurm_cluster, tmp_path) -> None:
    prelude = f'trainbench() {{ {shlex.quote(sys.executable)} -m suite.cli "$@"; }}\n'
    before = _completed(slurm_cluster)
    for line, expected in _commands():
        done = subprocess.run(["bash", "-c", prelude + line], capture_output=True, text=True, cwd=tmp_path,
                              env=env(**slurm_cluster.env, TRAINBENCH_DATA=str(tmp_path / "data")), timeout=900)
        assert done.returncode == expected, f"`{line}` exited {done.returncode}\n{done.stderr[-3000:]}"
    loaded = load_results(tmp_path / "results-slurm")
    assert loaded.errors == [] and len(loaded.results) == 1
    _, result = loaded.results[0]
    assert result.workload == "rec/dlrmv4" and result.status in ("reached", "budget") and result.steps > 0
    assert result.world_size == 2, result.world_size
    # slurmctld appends the job's completion record after the job has ended: wait for it (another test's job
    # may finish in the meantime, so the count is at least one more, and this job's own record is there)
    log = slurm_cluster.root / "jobcomp.txt"
    deadline = time.monotonic() + 60
    while not (_completed(slurm_cluster) >= before + 1 and _dlrmv4_completed(log)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _completed(slurm_cluster) >= before + 1 and _dlrmv4_completed(log), log.read_text() if log.exists() else ""
    deadline = time.monotonic() + 60
    while slurm_cluster.jobs() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not slurm_cluster.jobs()
