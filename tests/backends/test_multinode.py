"""Two nodes, emulated on one machine: two `trainbench run --nnodes 2 --node-rank R` processes meeting at one
--rdzv-endpoint on 127.0.0.1 train as one world (torchrun's static rendezvous, gloo), node 0 writes the one
result, node 1 writes nothing and says where it is; and the multi-node flags' bad input is refused."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from support.backend_util import ROOT, env, json_rows, trainbench

from suite.results.record import read_result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def marked(marker: str) -> list[int]:
    """Processes of ours still running whose environment carries `marker` (every descendant inherits it)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if f"TB_MULTINODE_TEST={marker}".encode() in (d / "environ").read_bytes().split(b"\0"):
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(d.name))
        except OSError:
            continue
    return found


def cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def two_nodes(tmp_path: Path, marker: str, *extra: str) -> tuple[dict[int, tuple[int, str, str]], set[str]]:
    """Nodes 0 and 1 started at once: the tiny topics_gpt with two layers to val_loss 3.2 (as test_layouts'
    layout runs), one process per node, one thread each. Returns each node's (exit code, stdout, stderr) and
    the command lines of every process that ran meanwhile."""
    endpoint = f"127.0.0.1:{free_port()}"
    procs, files = {}, {}
    for r in (0, 1):
        cmd = [sys.executable, "-m", "suite.cli", "run", "nlp/topics_gpt", "--variant", "tiny",
               "--set", "model.n_layer=2", "--set", "target.value=3.2", "--set", "budget.max_steps=200",
               "--nproc", "1", "--nnodes", "2", "--node-rank", str(r), "--rdzv-endpoint", endpoint,
               "--threads", "1", "--results", str(tmp_path / f"node{r}"), "--quiet", *extra]
        files[r] = (tmp_path / f"out{r}", tmp_path / f"err{r}")
        with open(files[r][0], "w") as out, open(files[r][1], "w") as err:  # files: a full pipe cannot block
            procs[r] = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT, env=env(TB_MULTINODE_TEST=marker))
    seen: set[str] = set()
    deadline = time.monotonic() + 400
    try:
        while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
            seen |= {cmdline(pid) for pid in marked(marker)}  # what runs while the two nodes train
            time.sleep(0.5)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
    return {r: (p.returncode, files[r][0].read_text(), files[r][1].read_text()) for r, p in procs.items()}, seen


def nothing_left(marker: str) -> bool:
    deadline = time.monotonic() + 10
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not marked(marker)


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["fsdp=2", "dp=2"])
def test_two_nodes_train_as_one_world_of_two(tmp_path, flag):
    marker = uuid.uuid4().hex
    ran, seen = two_nodes(tmp_path, marker, "--parallel", flag, "--json")
    outs = {r: (o, e) for r, (_, o, e) in ran.items()}
    for r, (rc, _, err) in ran.items():
        assert rc == 0, f"node {r}: {err[-3000:]}"

    (path,) = (tmp_path / "node0").rglob("*.json")  # exactly one result, on node 0
    assert not (tmp_path / "node1").exists() or not list((tmp_path / "node1").rglob("*"))
    result = read_result(path)
    assert result.status == "reached" and result.world_size == 2
    degree = flag.split("=")[0]
    assert result.parallel[degree] == 2 and result.hardware.node_count == 2
    # node 1 wrote nothing: its `--json` row is the run as its rank saw it, with node 0's run id
    (row0,), (row1,) = json_rows(outs[0][0]), json_rows(outs[1][0])
    assert row0["path"] == str(path) and "recorded_by" not in row0
    assert row1["path"] is None and row1["recorded_by"].startswith("node 0") and "node 1" in row1["recorded_by"]
    assert row1["run_id"] == row0["run_id"] == result.run_id
    assert row1["status"] == "reached" and row1["steps"] == result.steps
    # each node launched its rank with torchrun, and no warm fork server (it forks single-process runs only)
    assert sum("torch.distributed.run" in c for c in seen) >= 2, seen
    assert sum("suite.execution.child" in c and "torch.distributed.run" not in c for c in seen) >= 2, seen
    assert not any("forkserver" in c for c in seen), seen
    assert nothing_left(marker)  # no process left behind: the drivers, torchrun's agents, the ranks


@pytest.mark.slow
def test_two_nodes_without_isolation(tmp_path):
    """--no-isolate: each node's command re-runs itself under torchrun (one rank per node, in-process); node 0's
    rank writes the result, node 1's rank prints nothing and writes nothing."""
    marker = uuid.uuid4().hex
    ran, seen = two_nodes(tmp_path, marker, "--no-isolate")
    for r, (rc, _, err) in ran.items():
        assert rc == 0, f"node {r}: {err[-3000:]}"
    (path,) = (tmp_path / "node0").rglob("*.json")
    assert not (tmp_path / "node1").exists() or not list((tmp_path / "node1").rglob("*"))
    result = read_result(path)
    assert result.status == "reached" and result.world_size == 2 and result.hardware.node_count == 2
    assert sum("torch.distributed.run" in c for c in seen) >= 2, seen
    assert "reached" in ran[0][1] and "reached" not in ran[1][1]
    assert nothing_left(marker)


@pytest.mark.parametrize(("args", "named"), [
    (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "127.0.0.1:29500"], "--node-rank 2: must be in 0..1"),
    (["--node-rank", "1"], "--node-rank 1: must be in 0..0 for --nnodes 1"),
    (["--nnodes", "2", "--node-rank", "0"], "--nnodes 2 needs --rdzv-endpoint HOST:PORT"),
    (["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1"], "--rdzv-endpoint '127.0.0.1': expected HOST:PORT"),
    (["--nnodes", "2", "--rdzv-endpoint", ":29500"], "--rdzv-endpoint ':29500': expected HOST:PORT"),
    (["--nnodes", "2", "--rdzv-endpoint", "host:99999"], "--rdzv-endpoint 'host:99999': expected HOST:PORT"),
    (["--nnodes", "2", "--rdzv-endpoint", "host:1", "--executor", "local", "--jobs", "2"], "--nnodes: every node"),
])
def test_bad_multinode_flags_exit_2_naming_the_flag(tmp_path, args, named):
    p = trainbench("run", "nlp/topics_gpt", "--variant", "tiny", *args, "--results", str(tmp_path / "res"),
                   timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert named in " ".join((p.stdout + p.stderr).split())
    assert not (tmp_path / "res").exists()


def test_a_run_id_is_rank_zeros_on_every_rank(tmp_path):
    """Each node's launcher draws its own run id; the harness takes rank 0's, so node 1 can say which run it
    was part of. Two ranks under torchrun, each reporting the id it ended with."""
    script = tmp_path / "ids.py"
    script.write_text(
        "import os, json, sys\n"
        "from suite import distributed, devices\n"
        "info = distributed.from_env()\n"
        "distributed.init(info, devices.current(info.local_rank))\n"
        "got = distributed.from_main(f'rank{info.rank}')\n"
        "open(sys.argv[1] + f'.{info.rank}', 'w').write(json.dumps(got))\n"
        "import torch.distributed as dist\n"
        "distributed.barrier()\n"
        "dist.destroy_process_group()  # a rank leaving gloo while its peer still talks may abort\n")
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        str(script), str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT, env=env(),
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert [json.loads((tmp_path / f"out.{r}").read_text()) for r in (0, 1)] == ["rank0", "rank0"]


def test_the_endpoint_becomes_torchruns_static_rendezvous():
    from suite.backends import layout
    from suite.execution.processes import nnodes_of

    args = layout.torchrun_args(2, 1, "127.0.0.1:29500")
    assert args == ["--nnodes=2", "--node_rank=1", "--master_addr=127.0.0.1", "--master_port=29500"]
    assert layout.torchrun_args(3, 2, "[fd00::1]:29400")[2] == "--master_addr=fd00::1"
    assert nnodes_of(args) == 2 and nnodes_of(layout.torchrun_args()) == 1
