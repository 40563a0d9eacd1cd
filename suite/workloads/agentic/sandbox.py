"""A throw-away copy of a repository in which a policy's tool commands run, and cannot get out of.

Each `Sandbox` copies the task's repository into a fresh temporary folder; `run` starts a command there as a
child in its own session with a scrubbed environment (PATH, HOME and TMPDIR pointing into the folder, LANG; no
variable of the parent), under kernel limits: RLIMIT_CPU, RLIMIT_AS (memory), RLIMIT_FSIZE (largest file),
RLIMIT_NPROC (processes), RLIMIT_NOFILE, no core dumps, and a wall-clock timeout. Where the machine allows it the
child also gets a network namespace of its own (`unshare(CLONE_NEWNET)`: only a loopback that is down, so even
127.0.0.1 is unreachable) and, when we run as root, a user id of its own (a fresh uid per sandbox that owns only
the copy: files of other users that are not world-readable, ~/.ssh included, are closed to it, and RLIMIT_NPROC
counts exactly its own processes). After every command the session's process group, and every process of the
sandbox's uid, is SIGKILLed, so nothing it started outlives the turn. The file tools (`read_text`, `write_text`)
resolve a path (symlinks included) and refuse one that leads out of the folder. `enforced()` says what this
machine enforces; a limit it cannot enforce is named there, never silently assumed.

Each command ends with a `reason`: ok, exit_N, wall_timeout, cpu_limit, memory_limit, file_size_limit,
process_limit, network_denied, permission_denied, folder_quota; `path_escape` from the file tools.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import random
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


@dataclass(frozen=True)
class Limits:
    wall_s: float = 5.0
    cpu_s: int = 2
    memory_bytes: int = 512 << 20
    file_bytes: int = 8 << 20
    processes: int = 16
    open_files: int = 64
    output_bytes: int = 2048  # a command's output kept (the rest dropped: the observation is bounded)
    folder_bytes: int = 32 << 20  # the whole copy after a command (RLIMIT_FSIZE bounds one file only)


@dataclass
class RunResult:
    returncode: int | None
    output: str
    reason: str
    wall_s: float


class PathEscape(ValueError):
    pass


def _unshare(flags: int) -> bool:
    return _LIBC.unshare(flags) == 0


@functools.cache
def enforced() -> dict[str, str]:
    """What this machine enforces for a sandboxed command (probed once, in a child)."""
    root = os.geteuid() == 0
    net = _probe_netns(root)
    return {
        "wall_clock": "enforced (timeout, then SIGKILL of the session and the uid's processes)",
        "cpu": "enforced (RLIMIT_CPU)",
        "memory": "enforced (RLIMIT_AS)",
        "file_size": "enforced (RLIMIT_FSIZE; the folder's total checked after each command)",
        "processes": ("enforced (RLIMIT_NPROC on a uid of the sandbox's own)" if root else
                      "approximate (RLIMIT_NPROC counts all of this user's processes: set to those running now "
                      "plus the limit)"),
        "network": net,
        "filesystem": ("enforced for reads of files other users cannot read (commands run as a uid of the "
                       "sandbox's own that owns only the copy); world-readable system files stay readable; the "
                       "file tools refuse any path out of the folder" if root else
                       "NOT enforced for commands (not root: they run as this user and can read what it can); the "
                       "file tools refuse any path out of the folder"),
        "process_tree": ("enforced (own session; the session and every process of the sandbox's uid killed after "
                         "each command)" if root else
                         "partly (own session killed after each command; a child that starts its own session "
                         "escapes it)"),
    }


def _probe_netns(root: bool) -> str:
    flags = CLONE_NEWNET if root else CLONE_NEWUSER | CLONE_NEWNET
    pid = os.fork()
    if pid == 0:  # the child: try, report by exit status, never return into the caller
        os._exit(0 if _unshare(flags) else 1)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        return "enforced (a network namespace of its own: no interface up, 127.0.0.1 unreachable)"
    return ("NOT enforced: this machine refuses unshare(CLONE_NEWNET" + ("" if root else "|CLONE_NEWUSER") +
            ") (no CAP_SYS_ADMIN or user namespaces disabled); commands can open sockets")


@functools.cache
def _util_linux() -> dict[str, str] | None:
    found = {name: shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin") for name in ("unshare", "prlimit",
                                                                                        "setpriv")}
    return None if None in found.values() else {k: v for k, v in found.items() if v}


def _world_reachable(path: Path) -> bool:
    """Whether any user may execute `path`: o+x on the file and on every folder above it."""
    try:
        path = path.resolve()
        return all(os.stat(p).st_mode & 0o001 for p in [path, *path.parents])
    except OSError:
        return False


@functools.cache
def python_for_commands() -> str:
    """A Python the sandbox's commands can run: this one, or (as root, whose own may sit in a private folder such
    as /root/.pyenv) a system one every user may execute."""
    import sys

    if os.geteuid() != 0 or _world_reachable(Path(sys.executable)):
        return sys.executable
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"):
        if _world_reachable(Path(candidate)):
            return candidate
    return sys.executable  # nothing better: its commands then end `permission_denied`, recorded


def _nproc_now(uid: int) -> int:
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


class Sandbox:
    """A per-rollout copy of `source` (a folder) under a fresh temporary folder; `close` removes it."""

    def __init__(self, source: Path | None, limits: Limits = Limits(), parent: str | None = None):
        self.limits = limits
        self.root_mode = os.geteuid() == 0
        base = Path(parent or tempfile.gettempdir())
        if self.root_mode and not _world_reachable(base):
            raise ValueError(f"sandbox parent {base}: the sandbox's own uid must be able to reach its folder "
                             "(o+x on every folder above it); pass another parent or set TMPDIR")
        self.top = Path(tempfile.mkdtemp(prefix="tb-sandbox-", dir=parent))
        self.folder = self.top / "repo"
        if source is not None:
            shutil.copytree(source, self.folder, symlinks=True)
        else:
            self.folder.mkdir()
        self.uid = random.SystemRandom().randrange(1_000_000, 2_000_000_000) if self.root_mode else os.getuid()
        if self.root_mode:
            for path in [self.top, *self.top.rglob("*")]:
                os.lchown(path, self.uid, self.uid)
        self.net = enforced()["network"].startswith("enforced")
        self.closed = False

    # ---- file tools (confined to the folder) ------------------------------------------------------------

    def path(self, rel: str) -> Path:
        """The real path of `rel` inside the folder; PathEscape when it (or a symlink on the way) leads out."""
        target = (self.folder / rel).resolve()
        if target != self.folder.resolve() and self.folder.resolve() not in target.parents:
            raise PathEscape(f"{rel!r} leads out of the sandbox's folder")
        return target

    def read_text(self, rel: str) -> str:
        with open(self.path(rel), encoding="utf-8", errors="replace") as f:
            return f.read(self.limits.output_bytes)

    def write_text(self, rel: str, text: str) -> None:
        if len(text.encode()) > self.limits.file_bytes:
            raise PathEscape(f"{rel!r}: {len(text)} characters is over the file-size limit")
        target = self.path(rel)
        target.write_text(text, encoding="utf-8")
        if self.root_mode:
            os.lchown(target, self.uid, self.uid)

    # ---- commands ---------------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        home = str(self.folder)
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1"}

    def _preexec(self) -> None:  # runs in the child between fork and exec: no Python objects of the parent used
        lim = self.limits
        nproc = lim.processes if self.root_mode else _nproc_now(self.uid) + lim.processes
        for what, value in ((resource.RLIMIT_CPU, (lim.cpu_s, lim.cpu_s + 1)),
                            (resource.RLIMIT_AS, (lim.memory_bytes, lim.memory_bytes)),
                            (resource.RLIMIT_FSIZE, (lim.file_bytes, lim.file_bytes)),
                            (resource.RLIMIT_NPROC, (nproc, nproc)),
                            (resource.RLIMIT_NOFILE, (lim.open_files, lim.open_files)),
                            (resource.RLIMIT_CORE, (0, 0))):
            resource.setrlimit(what, value)
        if self.net:
            _unshare(CLONE_NEWNET if self.root_mode else CLONE_NEWUSER | CLONE_NEWNET)
        if self.root_mode:
            os.setgroups([])
            os.setgid(self.uid)
            os.setuid(self.uid)

    def _wrapped(self, argv: list[str]) -> list[str] | None:
        """The command behind util-linux's unshare / prlimit / setpriv, which set the same limits as `_preexec`
        without a Python preexec_fn: Popen can then vfork, not fork (a fork of a trainer holding a model costs
        ~0.1 s). None where a tool is missing (then `_preexec` does it)."""
        tools = _util_linux()
        if tools is None:
            return None
        lim = self.limits
        nproc = lim.processes if self.root_mode else _nproc_now(self.uid) + lim.processes
        out = []
        if self.net:
            out += [tools["unshare"], "--net"] if self.root_mode else [tools["unshare"], "--net", "--user"]
            out += ["--"]
        out += [tools["prlimit"], f"--cpu={lim.cpu_s}:{lim.cpu_s + 1}", f"--as={lim.memory_bytes}",
                f"--fsize={lim.file_bytes}", f"--nproc={nproc}", f"--nofile={lim.open_files}", "--core=0", "--"]
        if self.root_mode:
            out += [tools["setpriv"], f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--"]
        return out + argv

    def run(self, argv: list[str], stdin: str | None = None) -> RunResult:
        lim, t = self.limits, time.perf_counter()
        wrapped = self._wrapped(argv)
        proc = subprocess.Popen(wrapped or argv, cwd=self.folder, env=self._env(), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=None if wrapped else self._preexec, close_fds=True)  # noqa: PLW1509
        timed_out = False
        try:
            raw, _ = proc.communicate(stdin.encode() if stdin else None, timeout=lim.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._kill(proc.pid)
            raw, _ = proc.communicate()
        self._kill(proc.pid if proc.returncode is None else None)
        wall = time.perf_counter() - t
        output = raw[: lim.output_bytes].decode("utf-8", errors="replace")
        return RunResult(proc.returncode, output, self._reason(proc.returncode, output, timed_out), wall)

    def _reason(self, code: int | None, output: str, timed_out: bool) -> str:
        if timed_out:
            return "wall_timeout"
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            return "cpu_limit"
        if code == -signal.SIGXFSZ or "File too large" in output:
            return "file_size_limit"
        if self._folder_bytes() > self.limits.folder_bytes:
            return "folder_quota"
        if code == 0:
            return "ok"
        for needle, reason in (("MemoryError", "memory_limit"), ("Cannot allocate memory", "memory_limit"),
                               ("BlockingIOError", "process_limit"), ("Resource temporarily unavailable",
                                                                      "process_limit"),
                               ("Network is unreachable", "network_denied"), ("Permission denied",
                                                                               "permission_denied")):
            if needle in output:
                return reason
        return f"exit_{code}"

    def _folder_bytes(self) -> int:
        total = 0
        for p in self.folder.rglob("*"):
            try:
                if p.is_file() and not p.is_symlink():
                    total += p.stat().st_size
            except OSError:
                pass
        return total

    def _kill(self, pgid: int | None) -> None:
        """SIGKILL the command's session (not as root: a reaped pgid could be another's by now) and, as root,
        every process of the sandbox's uid (a child that left the session included)."""
        if not self.root_mode:
            if pgid is not None:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            return
        for _ in range(200):  # a fork bomb keeps forking while we kill: sweep until none is left
            pids = [int(d) for d in os.listdir("/proc") if d.isdigit() and _owned(int(d), self.uid)]
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)

    def live_processes(self) -> int:
        return sum(1 for d in os.listdir("/proc") if d.isdigit() and _owned(int(d), self.uid)) \
            if self.root_mode else 0

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._kill(None)
        shutil.rmtree(self.top, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _owned(pid: int, uid: int) -> bool:
    """A live (not zombie: a killed child waits for its parent's wait) process of `uid`."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != uid:
            return False
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False
