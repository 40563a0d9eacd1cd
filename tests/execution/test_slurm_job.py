"""`--slurm` settings and the batch script (suite/execution/slurm_job.py), the flags `--executor slurm` refuses,
and torchrun's rendezvous from a multi-node job's environment (Slurm's own `scontrol` expands the node list)."""

from __future__ import annotations

import subprocess

import pytest
from support.faults import ROOT, cli, env, sh, wait_for

from suite.execution import launch, slurm_job
from suite.execution.slurm_job import SlurmError, batch_script, parse


def test_settings_come_from_flags_and_a_yaml_file_later_ones_winning(tmp_path):
    lab = tmp_path / "lab.yaml"
    lab.write_text("partition: gpu\naccount: ml\ntime: '2:00:00'\ngpus_per_node: 8\nsbatch: ['--qos=high']\n"
                   "setup: ['module load cuda']\n")
    cfg = parse([str(lab), "partition=debug", "sbatch=#SBATCH --constraint=h100", "nodes=2"])
    assert (cfg.partition, cfg.account, cfg.time, cfg.gpus_per_node, cfg.nodes) == ("debug", "ml", "2:00:00", 8, 2)
    assert cfg.sbatch == ["--qos=high", "--constraint=h100"] and cfg.setup == ["module load cuda"]


@pytest.mark.parametrize("values, message", [
    (["partiton=gpu"], "partiton: Extra inputs are not permitted"),
    (["time=2h"], "'2h' is not a Slurm time limit"),
    (["gpus_per_node=-1"], "gpus_per_node: Input should be greater than or equal to 0"),
    (["sbatch=qos=high"], "an #SBATCH line is one sbatch option"),
    (["no-such.yaml"], "--slurm 'no-such.yaml': expected KEY=VALUE"),
])
def test_a_bad_setting_is_named(values, message):
    with pytest.raises(SlurmError, match="--slurm") as e:
        parse(values)
    assert message in str(e.value)


def test_the_batch_script_asks_for_what_the_settings_say_and_is_valid_bash(tmp_path):
    cfg = parse(["partition=gpu", "account=ml", "time=1-00:00:00", "gpus_per_node=8", "nodes=2",
                 "sbatch=--exclusive", "setup=source /opt/env.sh"])
    text = batch_script(cfg, tmp_path / "job", "tb-cv-digits_cnn-s0", 16, tmp_path)
    for line in ("#SBATCH --partition=gpu", "#SBATCH --account=ml", "#SBATCH --time=1-00:00:00",
                 "#SBATCH --gpus-per-node=8", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --cpus-per-task=16", "#SBATCH --exclusive", "#SBATCH --no-requeue", "source /opt/env.sh",
                 f"-m suite.execution.slurm_node run {tmp_path / 'job'}"):
        assert line in text
    assert text.index("#SBATCH --exclusive") < text.index("source /opt/env.sh")  # sbatch reads only the header
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_a_multi_node_rank_meets_node_0_at_its_slurm_address(slurm_cluster, monkeypatch):
    job = {"SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "tbnode,other[1-2]"}
    for k, v in slurm_cluster.env.items():  # scontrol reads the cluster's slurm.conf
        monkeypatch.setenv(k, v)
    assert slurm_job.hostnames("tbnode,other[1-2]") == ["tbnode", "other1", "other2"]
    assert slurm_job.rendezvous_from_env(job, 29511) == [
        "--nnodes=2", "--node_rank=1", "--master_addr=127.0.0.1", "--master_port=29511"]  # tbnode's NodeAddr
    with pytest.raises(SlurmError, match="start the ranks with srun"):
        slurm_job.rendezvous_from_env({}, 29511)


@pytest.mark.parametrize("flags, message", [
    (["--slurm", "partition=gpu"], "--slurm is for --executor slurm"),
    (["--executor", "slurm", "--jobs", "2"], "--jobs is for --executor local"),
    (["--executor", "slurm", "--nnodes", "2", "--node-rank", "1"], "Slurm places the nodes"),
    (["--executor", "slurm", "--slurm", "gpus=8"], "gpus: Extra inputs are not permitted"),
    (["--executor", "slurm", "--nnodes", "2", "--slurm", "nodes=3"], "--nnodes 2 and --slurm nodes=3 disagree"),
])
def test_slurm_flags_are_refused_with_the_reason(flags, message, tmp_path):
    p = sh("run", "cv/digits_cnn", "--variant", "tiny", "--results", str(tmp_path / "res"), *flags)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert not list(tmp_path.rglob("*.json"))


def test_settings_the_cluster_refuses_are_refused_before_anything_is_submitted(slurm_cluster, tmp_path):
    p = subprocess.run(cli("run", "cv/digits_cnn", "--variant", "tiny", "--results", str(tmp_path / "res"),
                           "--executor", "slurm", "--slurm", "partition=no_such_partition"),
                       env=env(**slurm_cluster.env), capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 2, p.stderr
    assert "sbatch refuses these settings" in p.stderr and "--partition=no_such_partition" in p.stderr, p.stderr
    assert "invalid partition" in p.stderr.lower(), p.stderr
    assert slurm_cluster.jobs() == []


def test_the_slurm_launcher_is_one_module_and_one_line():
    assert launch.LAUNCHERS["slurm"] == "suite.execution.slurm:SlurmLauncher" and "slurm" in launch.EXECUTORS


# ---- issue 50 items 1-2: every value checked for its field, every path quoted -------------------------------------

HOSTILE = [
    (["partition=debug\ntouch /tmp/x"], "partition: Value error, 'debug\\ntouch /tmp/x' is not a Slurm partition"),
    (["account=ml\ntouch /tmp/x"], "is not a Slurm account name"),
    (["qos=high\ntouch /tmp/x"], "is not a Slurm qos name"),
    (["qos=high --exclusive"], "is not a Slurm qos name"),
    (["partition=gpu,"], "is not a Slurm partition name"),
    (["mem=64G\ntouch /tmp/x"], "is not a Slurm memory size"),
    (["sbatch=--exclusive\rtouch /tmp/x"], "an #SBATCH line is one sbatch option"),
    (["python=/usr/bin/python3\ntouch /tmp/x"], "--slurm python"),
    (["workdir=/tmp/jobs\ntouch /tmp/x"], "--slurm workdir"),
]


@pytest.mark.parametrize("values, message", HOSTILE)
def test_a_value_that_would_leave_its_directive_is_refused_for_its_field(values, message):
    with pytest.raises(SlurmError) as e:
        parse(values)
    assert message in str(e.value)


def _header(text: str) -> list[str]:
    """The lines sbatch reads as directives: up to the first line that is not a comment (sbatch stops there)."""
    lines = text.splitlines()[1:]
    return lines[:next(i for i, line in enumerate(lines) if not line.startswith("#"))]


def test_every_setting_reaches_the_header_and_paths_are_quoted(tmp_path):
    cfg = parse(["partition=gpu,debug", "account=ml-team.a", "qos=high_prio", "mem=64G", "time=2:00:00",
                 "gpus_per_node=1", "sbatch=--exclusive"])
    folder = tmp_path / "a folder #1" / "job"
    text = batch_script(cfg, folder, "tb-cv-digits_cnn-s0", 2, tmp_path)
    header = _header(text)
    assert all(line.startswith("#SBATCH --") for line in header)
    for want in ("--partition=gpu,debug", "--account=ml-team.a", "--qos=high_prio", "--mem=64G", "--time=2:00:00",
                 "--exclusive", "--no-requeue", f"--output='{folder}/slurm-%j.out'"):
        assert f"#SBATCH {want}" in header, (want, header)
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    with pytest.raises(SlurmError, match="the job folder .*newline"):
        batch_script(cfg, tmp_path / "res\ntouch x", "tb-x-s0", 2, tmp_path)


@pytest.mark.parametrize("flags", [
    ["--slurm", "partition=debug\ntouch {marker}"],
    ["--slurm", "account=ml\ntouch {marker}"],
    ["--results", "{tmp}/res\ntouch {marker}"],
])
def test_a_newline_in_a_slurm_value_or_the_results_path_is_bad_input(flags, tmp_path):
    marker = tmp_path / "ran"
    flags = [f.format(marker=marker, tmp=tmp_path) for f in flags]
    results = [] if "--results" in flags else ["--results", str(tmp_path / "res")]
    p = sh("run", "cv/digits_cnn", "--variant", "tiny", "--executor", "slurm", *results, *flags)
    assert p.returncode == 2, p.stderr
    assert ("newline" in p.stderr or "is not a Slurm" in p.stderr) and "Traceback" not in p.stderr, p.stderr
    assert not marker.exists() and not list(tmp_path.rglob("*.json"))


@pytest.mark.slow
def test_a_results_folder_with_a_space_and_a_hash_runs_through_slurm(slurm_cluster, tmp_path):
    results = tmp_path / "my runs #2" / "res"
    p = subprocess.run(cli("run", "cv/digits_cnn", "--variant", "tiny", "--results", str(results), "--json",
                           "--threads", "1", "--quiet", "--executor", "slurm", "--slurm", "outcome_grace_s=2",
                           "--slurm", "poll_s=0.5", "--set", "budget.max_steps=3"),
                       env=env(**slurm_cluster.env), capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    from suite.results.record import load_results

    loaded = load_results(results)
    assert [r.status for _, r in loaded.results] in (["reached"], ["budget"]), [r.error for _, r in loaded.results]
    wait_for(lambda: slurm_cluster.jobs() == [], 60)  # the job may still be completing
