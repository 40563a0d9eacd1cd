"""The invocation's warm fork server: one process that has imported torch, the harness and each planned run's
task, model, data and backend modules, from which every single-process isolated child is forked (~0.1 s to
start instead of a fresh Python + torch import).

Importing those modules is most of the smoke tier's start-up (~4-6 s of CPU on this project's 2-core
machines), so `trainbench run` starts the server first thing (`launch.prewarm`, after the flags are checked,
before the specs are read): the server imports while the driver reads and checks the specs (which imports
torch too), on the other core. This module imports no torch. Later calls change nothing: the first list of
modules wins.
"""

from __future__ import annotations

from typing import Any

# imported once, by the fork server. torch._dynamo: every torch optimizer imports it on its first
# add_param_group (torch's `_disable_dynamo`), ~2 s that would otherwise fall into each run's init.
PRELOAD = ["torch", "torch._dynamo", "suite.harness", "suite.execution.child"]

_context: Any = None


def warm_modules(backend: str) -> list[str]:
    """The modules to preload: PRELOAD, every built-in task, model and data module (all cheap once torch is in:
    ~0.3 s together), and the backend's module when it is the suite's own. Not the runs' specs: the server
    starts before they are read (reading them imports torch). A user's module is never preloaded (one that
    fails on import would take the server down): such a run imports it in its untimed init, as a cold child."""
    from suite import registry

    refs = [*registry.TASKS.values(), *registry.MODELS.values(), *registry.DATASETS.values(),
            registry.BACKENDS.get(backend, "")]
    mods = list(PRELOAD)
    for ref in refs:
        mod = ref.partition(":")[0] if ":" in ref else None
        if mod and mod.startswith("suite.") and mod not in mods:
            mods.append(mod)
    return mods


def context(modules: list[str] | None = None, *, start: bool = False) -> Any:
    """The forkserver context, told what to preload on the first call; `start=True` also starts the server
    now (it imports in the background; the first fork waits for it) instead of at the first fork."""
    global _context
    if _context is None:
        import multiprocessing as mp

        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(modules or PRELOAD)
        _context = ctx
    if start:
        from multiprocessing import forkserver

        forkserver.ensure_running()
    return _context


def stop() -> None:
    """End a started fork server now (the run was refused after `start`): it would otherwise finish its
    imports, ~5 s, before it noticed that nobody will fork from it."""
    global _context
    from multiprocessing import forkserver

    server = forkserver._forkserver  # the stdlib keeps no public handle; 3.8-3.13 name it so
    pid = getattr(server, "_forkserver_pid", None)
    if pid:
        import os
        import signal

        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        for fd in (getattr(server, "_forkserver_alive_fd", None),):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None
    _context = None
