"""`--executor ray [--address ADDR]`: each run is a Ray task that runs the isolated child on its node.

The task is a thin shell around `IsolatedRun` (the same child, heartbeat and watchdog as on this machine),
so a hang, crash or OOM on a node is recorded exactly as it is locally. A run of several processes
(`--nproc N`) is one task that asks for N processes' resources, so all its ranks land on one node. Stop
requests (the driver's SIGINT/SIGTERM, --fail-fast) reach the tasks through a small actor they poll; each
stops its child, which records `interrupted`. Results: a task on the driver's own machine (same kernel boot
id) lets the child write into the results folder itself, as locally; a task elsewhere returns the result and
its MLLOG text and the driver writes them. Runs are not retried (max_restarts=0): a silently repeated run
would hide a flaky node, so the failure is recorded and the user re-runs.

A run lives in a detached actor of its own, not a plain task: Ray kills a dead driver's tasks at once, and
their worker's child processes with them, so the isolated child could never record that its driver died
(SIGKILL to `trainbench run`). A detached actor outlives the driver; its child notices the driver's death
like a local one does, records the run `interrupted`, and the actor then ends itself. The driver kills each
actor once it holds the actor's reply.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import traceback
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.execution.launch import Control, Options, Outcome
from suite.execution.processes import process_start_time

if TYPE_CHECKING:
    from suite.harness import RunRequest


def machine_id() -> str:
    """One machine: the host name and the kernel's boot id (two containers may share a host name)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def resources_for(req: RunRequest, cluster: dict[str, float], nproc: int = 1) -> dict[str, Any]:
    """Ray options for one run: an NPU run asks for the custom `NPU` resource, a GPU cluster for `num_gpus`,
    otherwise CPUs equal to the run's torch threads x processes (so Ray never packs more threads than cores)."""
    threads = req.threads or 1
    if req.backend == "npu":
        return {"num_cpus": 1, "resources": {"NPU": nproc}}
    if cluster.get("GPU", 0) > 0:
        return {"num_cpus": 1, "num_gpus": nproc}
    return {"num_cpus": min(threads * nproc, max(1, int(cluster.get("CPU", 1))))}


def describe(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text[-4000:]


def run_on_node(req: RunRequest, nproc: int, driver: str, stopper: Any,
                driver_process: tuple[int, str] | None = None) -> dict[str, Any]:
    """The Ray task: one isolated run on this node; returns what the driver needs to record it.

    On the driver's own machine the child watches the driver itself (its death stops the run, recorded as
    such); elsewhere it watches this task's worker, and a driver that is gone (its stop actor died) stops the
    run through the same signal a user's stop sends."""
    import tempfile

    import ray

    from suite.execution.isolated import IsolatedRun

    here = machine_id() == driver and req.results_dir is not None
    scratch = None
    if req.results_dir is not None and not here:
        scratch = Path(tempfile.mkdtemp(prefix="trainbench-ray-"))
    same_machine = machine_id() == driver
    run = IsolatedRun(replace(req, results_dir=req.results_dir if here else scratch), nproc=nproc, quiet=True,
                      warm=False, parent=driver_process if same_machine else None).start()
    seen, signum, orphan = 0, signal.SIGTERM, False
    while not run.poll():
        try:
            seen, signum = ray.get(stopper.count.remote(), timeout=5)
        except ray.exceptions.RayActorError:  # the driver is gone (its actor with it): stop the run
            seen, orphan = max(seen, 1), True
        except Exception:  # noqa: BLE001 - a slow answer under load: ask again next time
            pass
        if not orphan and same_machine and driver_process is not None:
            orphan = process_start_time(driver_process[0]) != driver_process[1]
        if not (same_machine and orphan):  # on the driver's machine its death stops the child by itself
            while len(run.signals) < seen:
                run.stop(signum or signal.SIGTERM)
        time.sleep(0.2)
    out = run.outcome()
    mllog = None
    if scratch is not None and out.path is not None and out.result.mllog:
        try:
            mllog = (out.path.parent / out.result.mllog).read_text(encoding="utf-8")
        except OSError:
            mllog = None
    if scratch is not None:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    if orphan or _driver_gone(stopper):
        ray.actor.exit_actor()  # nobody will ask for the reply or kill this detached actor: end it here
    return {"result": out.result.model_dump_json(), "path": str(out.path) if here and out.path else None,
            "mllog": mllog, "data_missing": out.data_missing, "signalled": out.signalled, "rc": out.returncode}


def _driver_gone(stopper: Any) -> bool:
    import ray

    try:
        ray.get(stopper.count.remote(), timeout=30)
    except ray.exceptions.RayActorError:
        return True
    except Exception:  # noqa: BLE001 - slow, not gone: the driver kills this actor when it reads the reply
        return False
    return False


class RunHost:
    """One run's detached actor (see the module docstring): the same task body, a lifetime of its own."""

    def run(self, req: RunRequest, nproc: int, driver: str, stopper: Any,
            driver_process: tuple[int, str] | None = None) -> dict[str, Any]:
        return run_on_node(req, nproc, driver, stopper, driver_process)


class RayLauncher:
    name = "ray"

    def __init__(self, options: Options, jobs: int = 1):
        self.options = options

    def run(self, requests: list[RunRequest], control: Control) -> Iterator[Outcome]:
        import ray

        from suite.measure.environment import fingerprint
        from suite.results import dead_runs
        from suite.results import record as results

        started_here = False
        if not ray.is_initialized():
            # address None: start a local instance; "auto" or ray://host:port: join a cluster
            ray.init(address=self.options.address, include_dashboard=False, log_to_driver=False)
            started_here = True
        control.reclaim_signals()  # ray.init takes SIGTERM (its handler aborts the driver): stops are ours
        try:
            cluster = ray.cluster_resources()

            @ray.remote(num_cpus=0)
            class Stopper:
                def __init__(self) -> None:
                    self.n, self.signum = 0, None

                def stop(self, signum: int | None) -> None:
                    self.n += 1
                    self.signum = self.signum or signum

                def count(self) -> tuple[int, int | None]:
                    return self.n, self.signum

            stopper = Stopper.remote()  # type: ignore[attr-defined]
            host_class = ray.remote(max_restarts=0, max_task_retries=0)(RunHost)
            pending: dict[Any, RunRequest] = {}
            hosts: dict[Any, Any] = {}
            driver = machine_id()
            me = (os.getpid(), process_start_time(os.getpid()) or "")
            todo = list(reversed(requests))
            sent = 0
            while todo or pending:
                while todo and not control.stopping:
                    req = todo.pop()
                    if req.threads is None:  # Ray reserves num_cpus=threads: runs packed on a node never oversubscribe
                        req = replace(req, threads=1)
                    opts = resources_for(req, cluster, self.options.nproc)
                    host = host_class.options(lifetime="detached", **opts).remote()
                    ref = host.run.remote(req, self.options.nproc, driver, stopper, me)
                    pending[ref], hosts[ref] = req, host
                if control.stopping:
                    todo.clear()
                while sent < control.count:
                    stopper.stop.remote(control.signum)
                    sent += 1
                if not pending:
                    break
                done, _ = ray.wait(list(pending), num_returns=1, timeout=0.2)
                for ref in done:
                    req = pending.pop(ref)
                    try:
                        reply = ray.get(ref)
                    except Exception as e:  # noqa: BLE001 - RayTaskError, RayActorError, ...: recorded
                        ray.kill(hosts.pop(ref))
                        result = dead_runs.error_result(req, "error", f"ray task failed: {describe(e)}",
                                                      fingerprint(), world_size=self.options.nproc)
                        path = results.write_run(req.results_dir, result) if req.results_dir else None
                        yield Outcome(result, path, None)
                        continue
                    ray.kill(hosts.pop(ref))
                    yield self._record(req, reply)
        finally:
            for host in hosts.values():  # only when the loop did not finish (an error here): no actor outlives us
                ray.kill(host)
            if started_here:
                ray.shutdown()

    @staticmethod
    def _record(req: RunRequest, reply: dict[str, Any]) -> Outcome:
        """The driver's side of a finished task: write what a remote node could not write here."""
        from suite.results import record as results

        result = results.parse_result(reply["result"], "ray task")
        missing = reply.get("data_missing")
        path = Path(reply["path"]) if reply.get("path") else None
        if path is None and req.results_dir is not None and not missing:
            path = results.write_run(req.results_dir, result, reply.get("mllog"))
        return Outcome(result, path, reply.get("signalled"), missing, reply.get("rc") or 0)
