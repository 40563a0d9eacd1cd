"""Break each documented promise on a scratch copy of the checkout and check that its test fails.

    python scripts/break_promises.py            # every breakage (a few minutes)
    python scripts/break_promises.py csp fsync  # those whose name contains a word

For each breakage: copy the tracked and untracked (not ignored) files to a temporary folder, make one small
textual change to the production code, run the named tests there, and expect them to FAIL. The checkout itself
is never touched. Exit status 1 when a breakage goes unnoticed (or its text no longer matches the code: then
the breakage must be updated, as the promise moved). docs/testing.md lists the same table.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
P = "tests/project/test_promises.py::"


@dataclass(frozen=True)
class Breakage:
    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


BREAKAGES = [
    Breakage(
        "clock-after-first-batch", "suite/harness.py",
        "        t0 = self.start_clock()\n"
        "        self.job.run_start_epoch = time.time()\n"
        "        (account := self.account).lap(\"init_s\", t0)\n"
        "        # a backend with model parallelism says which data shard this rank reads (TP peers read the same one)\n"
        "        shard = backend.data_shard()\n"
        "        data_rank, data_world = shard if shard is not None else (self.dist.rank, self.dist.world)\n"
        "        batches = self.faults.batches(iter(workload.train_batches(data_rank, data_world)))\n",
        "        shard = backend.data_shard()\n"
        "        data_rank, data_world = shard if shard is not None else (self.dist.rank, self.dist.world)\n"
        "        _it = iter(workload.train_batches(data_rank, data_world))\n"
        "        _first = next(_it)  # broken: the first batch is fetched before the clock starts\n"
        "        t0 = self.start_clock()\n"
        "        self.job.run_start_epoch = time.time()\n"
        "        (account := self.account).lap(\"init_s\", t0)\n"
        "        batches = self.faults.batches(__import__(\"itertools\").chain([_first], _it))\n",
        (P + "test_the_clock_starts_before_the_first_batch_is_touched",)),
    Breakage(
        "steady-includes-warmup", "suite/measure/metrics.py",
        "def steady_samples_per_s(step_times_s: Sequence[float], samples_per_step: int, skip_first: int = 1)",
        "def steady_samples_per_s(step_times_s: Sequence[float], samples_per_step: int, skip_first: int = 0)",
        (P + "test_steady_throughput_leaves_out_the_slow_first_step",)),
    Breakage(
        "no-folder-fsync", "suite/results/record.py",
        "        os.fsync(dir_fd)\n", "        pass\n",
        (P + "test_write_atomic_fsyncs_the_file_before_the_link_and_the_folder_after",)),
    Breakage(
        "no-file-fsync", "suite/results/record.py",
        "            os.fsync(f.fileno())\n", "            pass\n",
        (P + "test_write_atomic_fsyncs_the_file_before_the_link_and_the_folder_after",)),
    Breakage(
        "noise-floor-7pc", "suite/compare/model.py",
        "DEFAULT_NOISE_FLOOR = 0.05", "DEFAULT_NOISE_FLOOR = 0.07",
        (P + "test_default_noise_floor_is_five_percent",)),
    Breakage(
        "stall-window-20s", "suite/execution/watchdog.py",
        "MIN_STALL_S = 60.0", "MIN_STALL_S = 20.0",
        (P + "test_default_stall_window_is_max_of_a_minute_and_a_quarter_of_the_budget",)),
    Breakage(
        "csp-removed", "suite/site/templates/base.html",
        '<meta http-equiv="Content-Security-Policy"', '<meta name="removed-policy"',
        (P + "test_every_site_page_carries_a_strict_csp",)),
    Breakage(
        "csp-unsafe-inline", "suite/site/templates/base.html",
        "script-src 'self';", "script-src 'self' 'unsafe-inline';",
        (P + "test_every_site_page_carries_a_strict_csp",)),
    Breakage(
        "unreadable-file-crashes", "suite/results/record.py",
        "    except (OSError, UnicodeDecodeError) as e:\n        raise ResultError(f\"{path}: cannot read: {e}\")",
        "    except (UnicodeDecodeError,) as e:\n        raise ResultError(f\"{path}: cannot read: {e}\")",
        ("tests/results/test_faults_results.py::test_unreadable_file_is_named",)),
    Breakage(
        "write-in-place", "suite/results/record.py",
        "        os.link(tmp, path)  # fails with FileExistsError instead of replacing: results are append-only\n",
        "        with open(path, 'x') as g:  # broken: the result is written in place, visible half-written\n"
        "            for i in range(0, len(text), 65536):\n"
        "                g.write(text[i:i + 65536]); g.flush(); os.fsync(g.fileno())\n",
        ("tests/results/test_concurrency_results.py::test_sigkill_at_random_moments_never_leaves_a_bad_result",)),
    Breakage(
        "set-not-recorded", "suite/execution/plan.py",
        "overrides=prepared.overrides,", "overrides={},",
        ("tests/cli/test_cli.py::test_set_override_is_recorded",)),
    Breakage(
        "wedged-noticed-late", "suite/execution/isolated.py",
        "self.wedged_s = _stale_heartbeat(self.tmp, self.limits.stall_s + WEDGED_MARGIN_S)",
        "self.wedged_s = _stale_heartbeat(self.tmp, self.limits.stall_s + WEDGED_MARGIN_S + 60)",
        ("tests/execution/test_faults_runs.py::test_hang_holding_the_gil_is_ended_by_the_parent",)),
    Breakage(
        "fallback-record-late", "suite/execution/isolated.py",
        "        \"\"\"The run's Outcome (after poll() said True); writes the fallback record when the child wrote none.\"\"\"\n",
        "        \"\"\"The run's Outcome (after poll() said True); writes the fallback record when the child wrote none.\"\"\"\n"
        "        time.sleep(60)  # broken: the record of a run whose worker died comes a minute late\n",
        ("tests/execution/test_faults_runs.py::test_a_rank_killed_or_hung_in_a_two_process_run",)),
    Breakage(
        "eval-copy-keeps-tp-qkv-order", "suite/backends/parallel/pipeline.py",
        "            if tp > 1 and \".qkv.\" in target:", "            if False and tp > 1 and \".qkv.\" in target:",
        ("tests/backends/test_layouts.py::test_four_process_layouts_match_one_process",)),
]


def scratch_copy(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def main(words: list[str]) -> int:
    chosen = [b for b in BREAKAGES if not words or any(w in b.name for w in words)]
    unnoticed = 0
    for b in chosen:
        with tempfile.TemporaryDirectory(prefix=f"break-{b.name}-") as tmp:
            copy = Path(tmp)
            scratch_copy(copy)
            target = copy / b.file
            text = target.read_text()
            if text.count(b.old) != 1:
                print(f"STALE   {b.name}: the text to break is not (exactly once) in {b.file}; update the breakage")
                unnoticed += 1
                continue
            target.write_text(text.replace(b.old, b.new))
            env = dict(os.environ, PYTHONPATH=f"{copy}{os.pathsep}{copy / 'tests'}", OMP_NUM_THREADS="1")
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *b.tests],
                                  cwd=copy, env=env, capture_output=True, text=True, timeout=900)
            took = time.perf_counter() - t
            caught = proc.returncode == 1  # 1: tests ran and failed (2-5: collection/usage errors prove nothing)
            unnoticed += not caught
            last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
            why = next((ln.strip() for ln in proc.stdout.splitlines() if ln.startswith("E ")), "")
            print(f"{'CAUGHT ' if caught else 'MISSED '} {b.name:<26} {b.file:<30} {took:5.0f} s  {last}\n        {why}")
            if not caught:
                print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n")
    print(f"{len(chosen) - unnoticed} of {len(chosen)} breakages caught")
    return 1 if unnoticed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
