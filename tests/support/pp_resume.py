"""torchrun main: the kill-and-resume runs of a pipelined job (tests/backends/test_resume_pp.py), each rank running the
harness in-process as tests/support/engine_resume.py does for one process: the uninterrupted run, a run killed at
step 25 on every rank (the kill raises instead of SIGKILL: the process group lives on for the restarts), and
restarts from copies of the killed attempt's checkpoints: as they are, and with the optimizer's state left out (the
negative control), and under another split of the layers (schedule interleaved: two stages a rank). Each rank writes what it saw (losses, evaluations, a digest of its stage's weights under the
whole model's names) to OUT-rank<r>.json.

    python -m torch.distributed.run --standalone --nproc_per_node 2 -m support.pp_resume OUT DIR SPEC '{"parallel.pp": 2}' \
        [no-interleaved]
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch.distributed as dist

from suite import harness
from suite.backends.parallel import state_names
from suite.specload import load_spec
from support.engine_resume import KILL, NodeFailure


def _run(spec_path: str, overrides: dict[str, Any], folder: Path, kill: bool, job: bool = True) -> harness.Run:
    """One run checkpointing into `folder`; `job`: it carries the kill's spec (the killed attempt and its restarts)."""
    spec = load_spec(Path(spec_path), {**overrides, **(KILL if job else {})})
    req = harness.RunRequest(spec=spec, backend="torch", results_dir=None, threads=1, measure_peak=False,
                             checkpoint_dir=folder)
    the_run = harness.Run(req)
    if kill:  # a failed node takes the whole job down: every rank stops after step 25
        def fail() -> None:
            raise NodeFailure("killed")

        the_run.faults.rank = KILL["faults.kill_rank"]
        the_run.faults.kill = fail
    the_run.execute()
    if the_run.job.ckpt is not None:
        the_run.job.ckpt.wait()  # an asynchronous save in flight finishes (a SIGKILLed job: test_recovery.py)
    dist.barrier()
    return the_run


def _digest(the_run: harness.Run) -> str:
    backend = the_run.backend
    model = state_names.whole_view(backend.pipeline) if backend.pipeline is not None else the_run.train_state.model
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _seen(the_run: harness.Run) -> dict[str, Any]:
    r = the_run.result()
    return {"status": the_run.status, "steps": the_run.steps, "losses": the_run.losses,
            "curve": [p.metrics for p in the_run.curve], "weights": _digest(the_run),
            "recovery": r.goodput.recovery, "checkpoint": r.goodput.checkpoint, "parts_s": r.goodput.parts_s,
            "wall_s": r.goodput.wall_s, "parallel": r.parallel}


def _restart(spec: str, overrides: dict[str, Any], tmp: Path, name: str) -> harness.Run:
    """A restart of the killed job, from a copy of its checkpoints of its own."""
    if dist.get_rank() == 0:
        shutil.copytree(tmp / "killed", tmp / name)  # the killed attempt's checkpoints, for this restart alone
    dist.barrier()
    return _run(spec, overrides, tmp / name, kill=False)


def main(argv: list[str]) -> None:
    out, folder, spec, overrides_json, *flags = argv  # flags: `no-interleaved` (the GPT's stages have no such split)
    overrides = json.loads(overrides_json)
    tmp = Path(folder)
    seen: dict[str, Any] = {}
    seen["whole"] = _seen(_run(spec, overrides, tmp / "whole", kill=False, job=False))
    os.environ["TORCHELASTIC_RESTART_COUNT"] = "0"
    seen["killed"] = _seen(_run(spec, overrides, tmp / "killed", kill=True))
    os.environ["TORCHELASTIC_RESTART_COUNT"] = "1"  # what torchrun's agent sets on the restarted job
    seen["resumed"] = _seen(_restart(spec, overrides, tmp, "resumed"))
    # another split of the same layers: two stages a rank (loop style), the checkpoint's names the whole model's
    if "no-interleaved" not in flags:
        seen["interleaved"] = _seen(_restart(spec, {**overrides, "parallel.schedule": "interleaved"}, tmp, "interleaved"))
    orig_load = state_names.load

    def model_only(model: Any, optimizer: Any, app_state: dict[str, Any]) -> None:
        orig_load(model, None, app_state)  # the optimizer's moments and step counts stay as built: fresh

    state_names.load = model_only  # type: ignore[assignment]
    try:
        seen["no_optimizer"] = _seen(_restart(spec, overrides, tmp, "no_optimizer"))
    finally:
        state_names.load = orig_load
    Path(f"{out}-rank{dist.get_rank()}.json").write_text(json.dumps(seen, indent=1), encoding="utf-8")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
