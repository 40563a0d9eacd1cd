"""`--executor ray [--address ADDR]`: each (workload x backend x seed) run is a Ray task with resource requests.

Results stream back as tasks finish (ray.wait); the driver writes them. A task that raises, or whose worker
dies, is recorded as an `error` result. Tasks are not retried (max_retries=0): a silently repeated run would
hide a flaky node, so the failure is recorded instead and the user re-runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from suite.execution.launch import describe, error_result, from_worker, run_worker
from suite.harness import RunRequest
from suite.results import Result


def resources_for(req: RunRequest, cluster: dict[str, float]) -> dict[str, Any]:
    """Ray options for one run: an NPU run asks for the custom `NPU` resource, a GPU cluster for `num_gpus`,
    otherwise CPUs equal to the run's torch threads (so Ray never packs more threads than cores)."""
    threads = req.threads or 1
    if req.backend == "npu":
        return {"num_cpus": 1, "resources": {"NPU": 1}}
    if cluster.get("GPU", 0) > 0:
        return {"num_cpus": 1, "num_gpus": 1}
    return {"num_cpus": min(threads, max(1, int(cluster.get("CPU", 1))))}


def execute(requests: list[RunRequest], address: str | None = None) -> Iterator[Result]:
    import ray

    started_here = False
    if not ray.is_initialized():
        # address None: start a local instance; "auto" or ray://host:port: join a cluster
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
        started_here = True
    try:
        cluster = ray.cluster_resources()
        remote = ray.remote(max_retries=0)(run_worker)
        pending: dict[Any, RunRequest] = {}
        for req in requests:
            if req.threads is None:
                req.threads = 1  # Ray reserves num_cpus=threads, so runs packed on a node never oversubscribe
            ref = remote.options(**resources_for(req, cluster)).remote(req)
            pending[ref] = req
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                req = pending.pop(ref)
                try:
                    yield from_worker(ray.get(ref))
                except Exception as e:  # noqa: BLE001 - RayTaskError, WorkerCrashedError, ...: recorded
                    yield error_result(req, f"ray task failed: {describe(e)}")
    finally:
        if started_here:
            ray.shutdown()
