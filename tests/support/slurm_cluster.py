"""A real one-node Slurm cluster on this machine, for the `--executor slurm` tests (Debian's slurm-wlm + munge).

Everything lives in one folder of its own: a munge key and a munged on a private socket, a slurm.conf and a
cgroup.conf for one node `tbnode` on 127.0.0.1 with 2 CPUs (two partitions, so that a job of the `urgent` one
preempts one of `debug`), slurmctld and slurmd in the foreground as children of this process, on free ports.
Clients reach it through SLURM_CONF (`Cluster.env`). Nothing here touches /etc or a system munged/Slurm, and
`stop()` ends every daemon it started (and every process a job left), so nothing is left behind.

Needs root (slurmd starts jobs as their user) and the Debian packages (scripts/install_slurm.sh);
`unavailable()` says why a machine cannot start one.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo", "srun")
NODE = "tbnode"
KILL_WAIT_S = 5  # Slurm's grace between SIGTERM and SIGKILL when it ends a job (default 30)


def _find(name: str) -> str | None:
    return shutil.which(name) or next((str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name)
                                       if p.exists()), None)


def unavailable() -> str | None:
    """Why this machine cannot start the test cluster, or None when it can."""
    missing = [n for n in (*DAEMONS, *CLIENTS) if _find(n) is None]
    if missing:
        return (f"Slurm test cluster: {', '.join(missing)} not installed (Debian: apt-get install slurmctld slurmd "
                "slurm-client munge, or `bash scripts/install_slurm.sh`)")
    if os.geteuid() != 0:
        return "Slurm test cluster: slurmd must run as root to start jobs, and these tests do not run as root"
    return None


def _free_ports(n: int) -> list[int]:
    """n distinct free ports (all held open while choosing, so two are never the same)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


SLURM_CONF = """\
ClusterName=trainbench
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
MpiDefault=none
ReturnToService=2
KillWait={kill_wait}
MinJobAge=600
InactiveLimit=0
MessageTimeout=20
SlurmdTimeout=300
NodeName={node} NodeAddr=127.0.0.1 NodeHostname={host} CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes={node} MaxTime=INFINITE State=UP PriorityTier=2
"""


class PortTaken(RuntimeError):
    pass


@dataclass
class Cluster:
    root: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_s: float = 0.0  # how long start() took, until sinfo showed the node idle

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def client_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(list(argv), env=self.client_env(), capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")
        return p

    # ---- start and stop ----------------------------------------------------------------------------------

    def start(self, timeout_s: float = 60, tries: int = 3) -> Cluster:
        """Start munged, slurmctld and slurmd; wait until the node is idle. A port taken between choosing it and
        binding it (another process on this machine) is retried with new ports."""
        for attempt in range(tries):
            try:
                return self._start(timeout_s)
            except PortTaken:
                self.stop()
                if attempt == tries - 1:
                    raise
        return self

    def _start(self, timeout_s: float) -> Cluster:
        t0 = time.monotonic()
        root = self.root
        for old in [*root.glob("*.log"), *root.glob("*.out")]:  # a retry starts clean
            old.unlink()
        for sub in ("state", "spool", "munge"):
            shutil.rmtree(root / sub, ignore_errors=True)
            (root / sub).mkdir(parents=True)
        os.chmod(root, 0o755)  # munged refuses a key or socket folder that others may write
        os.chmod(root / "munge", 0o700)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = root / "munge" / "munge.socket"
        self._spawn("munged", [_find("munged") or "munged", "--foreground", "--force", f"--socket={sock}",
                               f"--key-file={key}", f"--pid-file={root / 'munge' / 'munged.pid'}",
                               f"--log-file={root / 'munge' / 'munged.log'}",
                               f"--seed-file={root / 'munge' / 'munged.seed'}", "--num-threads=2"])
        _wait(lambda: sock.exists(), 10, "munged's socket", self)
        ctld_port, slurmd_port = _free_ports(2)
        self.conf.write_text(SLURM_CONF.format(
            ctld_port=ctld_port, slurmd_port=slurmd_port, munge_socket=sock, root=root, node=NODE,
            host=socket.gethostname(), kill_wait=KILL_WAIT_S))
        # no cgroup plugin is used (proctrack/linuxproc, task/none: a container may not delegate cgroups), but
        # slurmd reads this file when present; say so explicitly rather than inherit a system one
        (root / "cgroup.conf").write_text("CgroupPlugin=autodetect\nIgnoreSystemd=yes\n")
        self._spawn("slurmctld", [_find("slurmctld") or "slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._spawn("slurmd", [_find("slurmd") or "slurmd", "-D", "-N", NODE, "-f", str(self.conf)])
        _wait(self.idle, timeout_s, "the node to be idle in sinfo", self)
        self.started_s = time.monotonic() - t0
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.out", "ab")  # noqa: SIM115 - the daemon's own stdout/stderr
        self.procs[name] = subprocess.Popen(argv, env=self.client_env(), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def idle(self) -> bool:
        for name, p in self.procs.items():
            if p.poll() is not None:
                logs = self.logs()
                if "Address already in use" in logs:
                    raise PortTaken(name)
                raise RuntimeError(f"{name} exited with {p.returncode}: {logs}")
        p = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False, timeout=10)
        return p.returncode == 0 and f"{NODE} idle" in p.stdout

    def logs(self, tail: int = 2000) -> str:
        out = []
        for f in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.out")):
            out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-tail:]}")
        return "\n".join(out)

    def jobs(self) -> list[str]:
        """Job ids Slurm still holds as pending, running or completing."""
        p = self.run("squeue", "-h", "-o", "%i %T", check=False, timeout=20)
        return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]

    def job_of(self, pid: int) -> str:
        """The Slurm job a process runs in (SLURM_JOB_ID in its environment)."""
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        return next(e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"SLURM_JOB_ID="))

    def state(self, job_id: str) -> str:
        p = self.run("scontrol", "show", "job", "-o", job_id, check=False)
        return next((f.split("=", 1)[1] for f in p.stdout.split() if f.startswith("JobState=")), "")

    def end_now(self, job_id: str, tries: int = 5) -> None:
        """Shorten a running job's time limit to now: Slurm ends it at its next time-limit check (every 30 s).
        scontrol turns `now` into a time to the second before it asks slurmctld, which refuses an end time
        already past ("Invalid time specified", Slurm 22.05): on a loaded machine the second can turn in
        between, so that refusal (and only it) is asked again."""
        argv = ("scontrol", "update", f"JobId={job_id}", "EndTime=now")
        for _ in range(tries):
            p = self.run(*argv, check=False)
            if p.returncode == 0:
                return
            if "Invalid time specified" not in p.stderr:
                break
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")

    def preempt(self, cpus: int = 1) -> str:
        """A job of the higher-priority `urgent` partition: when the node is full, Slurm preempts (cancels) a job
        of `debug` to make room for it."""
        return self.run("sbatch", "--parsable", "-p", "urgent", "-c", str(cpus), "-o", "/dev/null", "--wrap",
                        "sleep 1").stdout.strip()

    def fail_node(self) -> None:
        """Mark the node DOWN, as slurmctld does when a node stops answering: its jobs end as NODE_FAIL."""
        self.run("scontrol", "update", f"NodeName={NODE}", "State=DOWN", "Reason=trainbench-test")

    def wait_idle(self, timeout_s: float = 60) -> None:
        """Back to an idle node (after fail_node, ReturnToService brings it back; RESUME if it stays down)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            p = self.run("sinfo", "-h", "-N", "-o", "%t", check=False)
            if set(p.stdout.split()) == {"idle"}:  # one line per partition
                return
            if "down" in p.stdout or "drain" in p.stdout:
                self.run("scontrol", "update", f"NodeName={NODE}", "State=RESUME", check=False)
            time.sleep(0.5)
        raise RuntimeError(f"the node is not idle after {timeout_s} s: {self.logs()}")

    def stop(self) -> None:
        """Cancel every job, end the daemons (SIGTERM, then SIGKILL), and every process a job left."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "--user=root", check=False, timeout=20)
        for name in reversed(DAEMONS):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for pid in _stepd_pids(self.conf):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.procs.clear()


def _stepd_pids(conf: Path) -> list[int]:
    """Processes started under this cluster (their environment names its slurm.conf): slurmstepd and job processes."""
    want = f"SLURM_CONF={conf}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            environ = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if want in environ:
            found.append(int(d.name))
    return found


def _wait(predicate, timeout_s: float, what: str, cluster: Cluster) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.1)
    raise RuntimeError(f"Slurm test cluster: timed out after {timeout_s} s waiting for {what}\n{cluster.logs()}")
