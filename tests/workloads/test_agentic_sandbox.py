"""The sandbox of agentic rollouts (suite/workloads/agentic/sandbox.py) against hostile commands: each one ends
with its recorded reason, leaves no process behind, and nothing of the machine (environment, secrets, files out
of the folder) reaches its output. What this machine cannot enforce is skipped with the sandbox's own words."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from suite.data.rl.bugfix_repos import Config as RepoConfig
from suite.data.rl.bugfix_repos import load as load_repos
from suite.workloads.agentic.bugfix import BugFixEnv
from suite.workloads.agentic.sandbox import Limits, PathEscape, Sandbox, enforced, python_for_commands

SECRET = "tb-secret-7f3a9c"
ROOT = os.geteuid() == 0


def _py(box: Sandbox, code: str):
    return box.run([python_for_commands(), "-I", "-S", "-c", code])


@pytest.fixture
def box():
    b = Sandbox(None, Limits(wall_s=60, cpu_s=1, memory_bytes=256 << 20, file_bytes=1 << 20, processes=8))
    yield b
    b.close()
    assert b.live_processes() == 0 and not b.top.exists()  # the process tree and the copy end with it


def test_an_infinite_loop_ends_at_the_cpu_limit(box):
    r = _py(box, "while True: pass")
    assert r.reason == "cpu_limit" and box.live_processes() == 0


def test_a_sleeper_ends_at_the_wall_clock():
    with Sandbox(None, Limits(wall_s=0.5)) as b:
        r = b.run(["/bin/sh", "-c", "sleep 30 & sleep 30"])
        assert r.reason == "wall_timeout" and r.wall_s < 20
        assert b.live_processes() == 0  # the background sleeper too


def test_a_fork_bomb_is_bounded_and_killed(box):
    r = _py(box, "import os\nwhile True:\n    os.fork()")
    assert r.reason == "process_limit", r.output
    assert box.live_processes() == 0


def test_a_10_gb_write_stops_at_the_file_size_limit(box):
    r = _py(box, "f = open('big', 'wb')\nfor _ in range(10240):\n    f.write(b'0' * 2**20)")
    assert r.reason == "file_size_limit"
    assert (box.folder / "big").stat().st_size <= 1 << 20


def test_memory_beyond_the_limit_is_refused(box):
    assert _py(box, "x = bytearray(2**30)").reason == "memory_limit"


def test_the_environment_is_scrubbed(box, monkeypatch):
    monkeypatch.setenv("TB_API_TOKEN", SECRET)
    r = _py(box, "print(open('/proc/self/environ').read())")
    assert r.reason == "ok" and SECRET not in r.output and f"HOME={box.folder}" in r.output


def test_home_secrets_are_out_of_reach(box, tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key = home / ".ssh" / "id_rsa"
    key.write_text(SECRET)
    key.chmod(0o600)
    (home / ".ssh").chmod(0o700)
    monkeypatch.setenv("HOME", str(home))
    r = _py(box, "import os\nprint(open(os.path.expanduser('~/.ssh/id_rsa')).read())")
    assert SECRET not in r.output and r.reason == "exit_1" and "FileNotFoundError" in r.output  # HOME is the copy
    if not ROOT:
        pytest.skip(f"not root: {enforced()['filesystem']}")
    r = _py(box, f"print(open({str(key)!r}).read())")
    assert r.reason == "permission_denied" and SECRET not in r.output


def test_a_symlink_out_is_refused_by_the_tools(tmp_path):
    secret = tmp_path / "outside.txt"
    secret.write_text(SECRET)
    repos = load_repos(RepoConfig(eval_tasks=1))
    env = BugFixEnv(repos.held_out[0], Limits(wall_s=30))
    env.reset()
    assert env.box is not None
    r = _py(env.box, f"import os\nos.remove('m.py')\nos.symlink({str(secret)!r}, 'm.py')")
    assert r.reason == "ok"
    step = env.step("cat")  # the file tool follows the link, sees it leads out, refuses
    assert step.reason == "path_escape" and SECRET not in step.observation
    assert env.step("edit 1 a=1").reason == "path_escape" and secret.read_text() == SECRET
    with pytest.raises(PathEscape):
        env.box.read_text("../../outside.txt")
    assert env.reward() == 0.0  # the tests fail on the link, and the sandbox is gone with the episode
    assert env.box is None and secret.read_text() == SECRET


def test_a_socket_to_localhost_is_unreachable(box):
    if not enforced()["network"].startswith("enforced"):
        pytest.skip(enforced()["network"])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    r = _py(box, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5).sendall(b'x')")
    assert r.reason == "network_denied", r.output
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()


def test_a_parent_folder_the_sandbox_uid_cannot_reach_is_refused(tmp_path):
    if not ROOT:
        pytest.skip("as another user the commands run as this user, who reaches tmp_path")
    tmp_path.chmod(0o700)
    with pytest.raises(ValueError, match="o\\+x on every folder above it"):
        Sandbox(None, parent=str(tmp_path))


def test_what_is_enforced_is_said():
    said = enforced()
    assert set(said) >= {"wall_clock", "cpu", "memory", "file_size", "processes", "network", "filesystem",
                         "process_tree"}
    assert all(isinstance(v, str) and v for v in said.values())
    assert Path(python_for_commands()).exists()


def test_without_util_linux_the_preexec_path_sets_the_same_limits(monkeypatch):
    """Where unshare / prlimit / setpriv are missing, the limits are set between fork and exec instead."""
    from suite.workloads.agentic import sandbox

    monkeypatch.setattr(sandbox, "_util_linux", lambda: None)
    monkeypatch.setenv("TB_API_TOKEN", SECRET)
    with Sandbox(None, Limits(wall_s=60, file_bytes=1 << 20, processes=8)) as b:
        assert b._wrapped(["true"]) is None
        r = _py(b, "import os\nprint(os.getuid(), open('/proc/self/environ').read())")
        assert r.reason == "ok" and SECRET not in r.output
        assert (int(r.output.split()[0]) == b.uid) == ROOT
        assert _py(b, "open('big', 'wb').write(b'0' * 2**21)").reason == "file_size_limit"
        assert _py(b, "import os\nwhile True:\n    os.fork()").reason == "process_limit"
        if enforced()["network"].startswith("enforced"):
            code = "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=5)"
            assert _py(b, code).reason == "network_denied"
        assert b.live_processes() == 0


def test_each_sandbox_is_a_throw_away_copy(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "m.py").write_text("a=1\n")
    tmp_path.chmod(0o755)
    with Sandbox(repo) as b:
        assert _py(b, "open('m.py', 'w').write('a=2\\n')").reason == "ok"
        assert b.read_text("m.py") == "a=2\n"
        with Sandbox(repo) as other:  # a second rollout sees the original
            assert other.read_text("m.py") == "a=1\n"
    assert (repo / "m.py").read_text() == "a=1\n" and not b.top.exists()
