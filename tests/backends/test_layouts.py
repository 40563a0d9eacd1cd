"""Layouts as data (`--parallel`, the spec's `parallel:` block), micro-batching and weight decay, in every backend.

Parity: the loss curve of the first 20 steps (fp32, same seed and data: the test char GPT's ranks slice one
global batch) against the single-process torch run, and torch's evaluations after steps 10 and 20. Tolerances
are multiples of a bound the test measures first, on the machine that runs it (tests/support/noise.py): how far
one more correct run may lie from the reference, predicted from the spread of the reference and four reorderings
of its arithmetic (each batch's samples permuted) with a Student-t bound that a correct run exceeds with
probability 1e-3. fp32 rounding of ~1e-7 per step grows through AdamW (its update divides by sqrt(v), so tiny
gradient differences of rarely-seen tokens become full-size steps) to ~1e-4..1e-3 nats by step 20.
- the same arithmetic in another order (micro-batches, gloo all-reduce, FSDP2 reduce-scatter, DTensor partial
  matmuls, pipeline micro-batches, DeepSpeed accumulation, compile): `noise.SAME_MATH` x the bound.
- Megatron (its own attention and LayerNorm kernels, vocab-parallel cross-entropy): `noise.OTHER_KERNELS` x.
- activation checkpointing recomputes the same ops: bit-identical, allowed 1e-6.
Seen on an AMD EPYC Zen 5 (issue 42), natively / with AVX2 kernels forced (as on an AVX2-only Zen 3, whose
figures forced AVX2 reproduces exactly): the curve's bound 1.9e-3 / 3.1e-3; the 4-process torch layouts' largest
gap 2.5e-4 (dp x pp) / 1.13e-3 (fsdp x tp), Megatron tp x pp 4.7e-4 / 1.9e-3 (allowed twice the bound). Until
issue 42 the tolerance was twice the largest gap of three permutations and a 2-thread run (4.6e-4 / 9.6e-4 here),
which fsdp x tp and two TP layouts exceeded by 10-20% with AVX2 kernels.
The tolerances stay meaningful: another seed's curve is > 5x away, and a known evaluation bug (a TP qkv row
order left regrouped, measured on the reference's own trained model) moves the evaluation by 20x the
tolerance after step 10 (asserted: `Noise.catches`; after step 20 the evaluation's own drift is as large).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from support.backend_util import CHAR_GPT, ROOT, env, run_hang_guard_s, set_flags, trainbench
from support.curves import loss_curve
from support.noise import OTHER_KERNELS, SAME_MATH, Noise, measure

from suite.algorithms.optimizers import build_optimizer
from suite.backends import layout
from suite.spec import SpecError
from suite.specload import load_spec

torch.set_num_threads(1)

STEPS = 20
EVAL_AT = (10,)  # an evaluation mid-way as well: there rounding has not grown yet (scale ~1e-4), a bug has


def worst(got: list[float], want: list[float]) -> float:
    assert len(got) == len(want) == STEPS
    return max(abs(a - b) for a, b in zip(got, want, strict=True))


def agree(got: list[float], want: list[float], tol: float, what: str = "") -> None:
    gap = worst(got, want)
    assert gap <= tol, f"{what}: loss curves differ by up to {gap:.2e} (> {tol:.0e}):\n{got}\n{want}"
    assert want[-1] < want[0] - 0.5  # learning curves, not flat lines that trivially agree


def _reference(options: dict | None = None) -> tuple[list[float], dict[int, dict], Noise]:
    """The one-process torch curve, its evaluations (after EVAL_AT and the last step) and its noise scale."""
    return measure(CHAR_GPT, STEPS, eval_at=EVAL_AT, options=options)


@pytest.fixture(scope="module")
def reference() -> tuple[list[float], dict[int, dict], Noise]:
    return _reference()


@pytest.fixture(scope="module")
def single(reference) -> list[float]:
    return reference[0]


@pytest.fixture(scope="module")
def noise(reference) -> Noise:
    return reference[2]


CLIP = {"grad_clip": 0.5}  # clips every one of the 20 steps (the curve moves by 0.65 nats by step 20)


@pytest.fixture(scope="module")
def clipped() -> tuple[list[float], dict[int, dict], Noise]:
    """With torch's own gradient clipping (`nn.utils.clip_grad_norm_`) in the one process."""
    return _reference(CLIP)


def test_the_tolerances_are_measured_and_mean_something(noise, single):
    """The spread is a real drift (not 0: the reorderings do reorder), it grows with the steps, a known evaluation
    bug lies far outside the evaluation's tolerance mid-way, and another seed lies far outside the curve's. After
    step 20 the evaluation's rounding drift is as large as that bug (issue 42, AMD Zen 5: the bug 1.1e-2, the
    bound 6.0e-3 natively and 9.7e-3 with AVX2 kernels; on an Intel Xeon the evaluation's gaps reached 3.7e-3), so
    the bug is caught after step 10, where the drift has not grown yet."""
    assert noise.sigma > 0 and all(gaps["curve"] > 0 for gaps in noise.seen.values()), noise
    assert noise.evals[EVAL_AT[0]] < noise.evals[STEPS], noise
    step = EVAL_AT[0]
    assert noise.catches(step), f"after step {step} the qkv bug moves val_loss {noise.qkv_bug[step]:.2e}: {noise}"
    assert noise.qkv_bug[step] > 20 * noise.eval_tol(step), noise  # mid-way: a wide margin (70x-140x seen)
    assert worst(loss_curve(CHAR_GPT, "torch", STEPS, seed=1), single) > 5 * noise.tol(OTHER_KERNELS), noise


def test_the_bound_fails_a_correct_run_at_most_once_in_a_thousand_and_catches_an_offset():
    """tests/support/noise.py's bound on simulated runs of its model (each run the mean curve plus one rounding
    perturbation that grows 1.8x a step over 20 steps; the reference and four reorderings measured): a fifth
    correct run lies outside it at most ALPHA of the time, one offset by 30 deviations at one step (three times
    the mean bound) nearly never inside; where every run gave the same bits, one ulp passes and a hundred fail."""
    import numpy as np
    from support import noise as nz

    rng = np.random.default_rng(0)
    trials, k = 20_000, len(nz.REORDERINGS)
    growth = 1e-7 * 1.8 ** np.arange(STEPS)
    runs = 3.0 + rng.standard_normal((trials, k + 2, 1)) * growth
    bug = 30 * growth * (np.arange(STEPS) == STEPS - 1)
    fails = caught = 0
    for run in runs:
        curves = run[: k + 1].tolist()
        tol = nz.bound(curves, [{STEPS: c[-1]} for c in curves])[0]
        fails += worst(run[k + 1].tolist(), curves[0]) > tol
        caught += worst((run[k + 1] + bug).tolist(), curves[0]) > tol
    assert fails <= nz.ALPHA * trials, fails  # seen 9 of 20,000 (and 19,994 offsets caught)
    assert caught >= 0.99 * trials, caught
    flat = [[3.0] * STEPS] * (k + 1)
    tol = nz.bound(flat, [{STEPS: 3.0}] * (k + 1))[0]
    assert worst([3.0 + 2.4e-7] * STEPS, flat[0]) <= tol < worst([3.0 + 2.4e-5] * STEPS, flat[0])


# ---- layouts as data: parsing, the product rule, micro-batches, torchrun arguments ---------------------------


def test_the_flag_is_spec_overrides():
    assert layout.parse_flag("dp=2,fsdp=4,tp=2,pp=2,cp=1") == {
        "parallel.dp": 2, "parallel.fsdp": 4, "parallel.tp": 2, "parallel.pp": 2, "parallel.cp": 1}
    assert layout.parse_flag("pp=2,schedule=gpipe") == {"parallel.pp": 2, "parallel.schedule": "gpipe"}
    for bad in ("tp", "xp=2", "tp=two", "tp=0"):
        with pytest.raises(layout.LayoutError, match="--parallel"):
            layout.parse_flag(bad)


def test_the_product_must_equal_the_process_count():
    spec = load_spec(CHAR_GPT, {"parallel.tp": 2})
    assert layout.resolve(spec.parallel, 4) == layout.Layout(dp=2, tp=2, sp=True, loss_parallel=True)  # dp: the rest
    assert layout.resolve(None, 3) == layout.Layout(dp=3)
    assert "does not divide the 2 processes" in layout.check(load_spec(CHAR_GPT, {"parallel.tp": 4}), 2)
    explicit = load_spec(CHAR_GPT, {"parallel.dp": 2, "parallel.tp": 2})
    assert "multiply to 4, not the 2 processes" in layout.check(explicit, 2)
    assert "context parallelism" in layout.check(load_spec(CHAR_GPT, {"parallel.cp": 2}), 2)


def test_micro_batches():
    spec = load_spec(CHAR_GPT, {"data.micro_batch_size": 4})  # batch 32
    assert layout.micro_batches(spec, layout.Layout(dp=1)) == (4, 8)
    assert layout.micro_batches(spec, layout.Layout(dp=2)) == (4, 4)  # per data-parallel rank
    assert layout.micro_batches(spec, layout.Layout(tp=2)) == (4, 8)  # TP peers read the same batch
    plain = load_spec(CHAR_GPT)
    assert layout.micro_batches(plain, layout.Layout(dp=2)) == (16, 1)
    assert layout.micro_batches(plain, layout.Layout(pp=2)) == (16, 2)  # a pipeline's default: pp micro-batches
    with pytest.raises(SpecError, match="micro_batch_size 5 does not divide batch_size 32"):
        load_spec(CHAR_GPT, {"data.micro_batch_size": 5})
    with pytest.raises(SpecError, match="micro_batch_size"):
        load_spec(CHAR_GPT, {"data.micro_batch_size": 0})
    odd = load_spec(CHAR_GPT, {"data.micro_batch_size": 16})
    assert "does not divide the local batch 8" in layout.check(odd, 4)


def test_torchrun_arguments():
    assert layout.torchrun_args() == ["--standalone"]
    assert layout.torchrun_args(nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.1:29500") == [
        "--nnodes=2", "--node_rank=1", "--master_addr=10.0.0.1", "--master_port=29500"]
    with pytest.raises(layout.LayoutError, match="--rdzv-endpoint"):
        layout.torchrun_args(nnodes=2, node_rank=0)
    with pytest.raises(layout.LayoutError, match="--node-rank 2"):
        layout.torchrun_args(nnodes=2, node_rank=2, rdzv_endpoint="h:1")


def test_the_layout_is_not_in_the_spec_hash_but_micro_batching_is():
    base = load_spec(CHAR_GPT)
    assert load_spec(CHAR_GPT, {"parallel.fsdp": 2}).spec_hash() == base.spec_hash()
    assert load_spec(CHAR_GPT, {"data.micro_batch_size": 8}).spec_hash() != base.spec_hash()
    # which parameters decay changes nothing while nothing decays (char GPT: weight_decay 0)
    assert load_spec(CHAR_GPT, {"optimizer.decay": "all"}).spec_hash() == base.spec_hash()
    decayed = load_spec(CHAR_GPT, {"optimizer.weight_decay": 0.1})
    assert load_spec(CHAR_GPT, {"optimizer.weight_decay": 0.1, "optimizer.decay": "all"}).spec_hash() != \
        decayed.spec_hash()


def test_an_impossible_layout_is_refused_before_anything_starts(tmp_path):
    p = trainbench("run", "nlp/topics_gpt", "--nproc", "2", "--parallel", "tp=4", "--results", str(tmp_path))
    assert p.returncode == 2, p.stderr
    text = " ".join(p.stderr.split())
    assert "parallel tp=4" in text and "does not divide the 2 processes" in text
    assert "init" not in text and not list(tmp_path.rglob("*.json"))
    p = trainbench("run", "nlp/topics_gpt", "--parallel", "tp=2,bogus=1", "--results", str(tmp_path))
    assert p.returncode == 2 and "--parallel" in p.stderr
    p = trainbench("run", "cv/digits_cnn", "--nproc", "2", "--parallel", "tp=2", "--results", str(tmp_path))
    assert p.returncode == 2 and "model.arch gpt" in " ".join(p.stderr.split())


# ---- weight decay: the spec's rule, applied by every backend --------------------------------------------------


def test_weight_decay_skips_one_dimensional_parameters_by_default():
    spec = load_spec(CHAR_GPT, {"optimizer.weight_decay": 0.1})
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    groups = build_optimizer(spec.optimizer, model.parameters()).param_groups
    by_decay = {g["weight_decay"]: {tuple(p.shape) for p in g["params"]} for g in groups}
    assert by_decay == {0.1: {(4, 4)}, 0.0: {(4,)}}
    every = load_spec(CHAR_GPT, {"optimizer.weight_decay": 0.1, "optimizer.decay": "all"}).optimizer
    assert [g["weight_decay"] for g in build_optimizer(every, model.parameters()).param_groups] == [0.1]
    muon = load_spec(CHAR_GPT, {"optimizer.weight_decay": 0.1, "optimizer.name": "muon"}).optimizer
    assert {g["use_muon"]: g["weight_decay"] for g in build_optimizer(muon, model.parameters()).param_groups} == {
        True: 0.1, False: 0.0}


def _decayed_elements(backend: str, overrides: dict, options: dict | None = None) -> tuple[int, int]:
    """(elements the backend's optimizer decays, elements of >= 2-D parameters of the model it trains)."""
    from suite import devices, registry
    from suite.backends.base import RunOptions
    from suite.data.locate import data_root
    from suite.harness import seed_everything
    from suite.workloads.contract import Context

    spec = load_spec(CHAR_GPT, overrides)
    seed_everything(0)
    device = devices.current(0)
    workload = registry.task_class(spec.task)(spec, Context(data_root=data_root(), seed=0, device=device.torch))
    be = registry.backend_class(backend)(device)
    try:
        state = be.setup(workload, RunOptions(options=options or {}))
        decayed = sum(p.numel() for g in state.optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"])
        matrices = sum(p.numel() for p in state.raw_model.parameters() if p.requires_grad and p.ndim >= 2)
    finally:
        be.close()
    return decayed, matrices


@pytest.mark.parametrize(("backend", "options"), [("torch", {}), ("deepspeed", {"zero_stage": 0}),
                                                   ("deepspeed", {"zero_stage": 2}), ("megatron", {})])
def test_every_backend_decays_exactly_the_matrices(backend, options):
    """The optimizer each backend steps (DeepSpeed's ZeRO groups hold flat partitions; Megatron's own names)
    decays exactly the elements of the >= 2-D parameters, and everything under `decay: all`."""
    wd = {"optimizer.weight_decay": 0.1}
    decayed, matrices = _decayed_elements(backend, wd, options)
    assert decayed == matrices > 0
    decayed_all, _ = _decayed_elements(backend, {**wd, "optimizer.decay": "all"}, options)
    assert decayed_all > matrices  # the norms' gains are decayed too


@pytest.mark.slow
def test_backends_train_alike_with_weight_decay():
    # at the spec's lr 3e-3 this small model's loss turns chaotic from step ~12 once decay is on: Megatron's
    # kernels then drift from torch's by up to 3e-2 by step 20 under EITHER rule (decay: all drifts the same
    # way), so that setting tests chaos, not the rule (checked exactly above). At lr 2e-3: seen 1.3e-3.
    wd = {"optimizer.weight_decay": 0.01, "optimizer.lr": 0.002}
    want, _, decayed = measure(CHAR_GPT, STEPS, overrides=wd)
    agree(loss_curve(CHAR_GPT, "deepspeed", STEPS, {"zero_stage": 2}, overrides=wd), want, decayed.tol(), "deepspeed")
    agree(loss_curve(CHAR_GPT, "megatron", STEPS, overrides=wd), want, decayed.tol(OTHER_KERNELS), "megatron")


# ---- single-process parity: micro-batching, activation checkpointing, DeepSpeed compile ----------------------


@pytest.mark.slow
def test_micro_batching_matches_one_batch_in_torch_and_deepspeed(single, noise):
    micro = {"data.micro_batch_size": 8}  # 4 x 8 == 1 x 32
    agree(loss_curve(CHAR_GPT, "torch", STEPS, overrides=micro), single, noise.tol(), "torch 4x8")
    agree(loss_curve(CHAR_GPT, "deepspeed", STEPS, overrides=micro), single, noise.tol(), "deepspeed 4x8")
    assert loss_curve.last_layout["gradient_accumulation_steps"] == 4  # type: ignore[attr-defined]


@pytest.mark.slow
def test_micro_batching_matches_one_batch_in_megatron(noise):
    want = loss_curve(CHAR_GPT, "megatron", STEPS)
    agree(loss_curve(CHAR_GPT, "megatron", STEPS, overrides={"data.micro_batch_size": 8}), want, noise.tol(),
          "megatron 4x8 vs 1x32")
    assert loss_curve.last_layout["micro_batches"] == 4  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["full", "selective"])
def test_activation_checkpointing_changes_nothing_but_memory(single, mode):
    agree(loss_curve(CHAR_GPT, "torch", STEPS, overrides={"parallel.ac": mode}), single, 1e-6, f"ac {mode}")
    assert loss_curve.last_layout["ac"] == mode  # type: ignore[attr-defined]
    fraction = loss_curve.last_layout["recompute_fraction"]  # type: ignore[attr-defined]
    assert (0.5 < fraction < 1) if mode == "full" else fraction == 0.0  # the blocks' share of the forward


@pytest.mark.slow
def test_deepspeed_activation_checkpointing_and_compile(single, noise):
    agree(loss_curve(CHAR_GPT, "deepspeed", STEPS, overrides={"parallel.ac": "full"}), single, 1e-6, "ds ac")
    agree(loss_curve(CHAR_GPT, "deepspeed", STEPS, compile=True), single, noise.tol(), "ds compile")
    assert loss_curve.last_layout["compile"] is True  # type: ignore[attr-defined]


# ---- several processes (torchrun, gloo) ---------------------------------------------------------------------


# hang guards: a torchrun launch of several layouts may take this long on a loaded 2-core machine; a test that
# launches one gets a pytest timeout above it and the module's reference curves (pyproject's 600 s was below it)
LAUNCH_GUARD_S = 900
REFERENCE_S = 300  # the module-scoped one-process curves, built within the first test that needs them
LAUNCH_TEST_TIMEOUT_S = 2 * REFERENCE_S + LAUNCH_GUARD_S + 120


def _launch(tmp_path, nproc: int, jobs: list[dict]) -> dict[str, dict]:
    out = tmp_path / "curves.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           "-m", "support.curves", str(out), str(CHAR_GPT), str(STEPS), *(json.dumps(j) for j in jobs)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=LAUNCH_GUARD_S)
    assert p.returncode == 0, p.stderr[-4000:]
    return {json.dumps([r["backend"], r.get("overrides")], sort_keys=True): r for r in json.loads(out.read_text())}


def _get(rows: dict[str, dict], backend: str, overrides: dict) -> dict:
    return rows[json.dumps([backend, overrides], sort_keys=True)]


TWO = [
    ("torch", {"parallel.fsdp": 2}, {"fsdp": 2}),
    ("torch", {"parallel.tp": 2}, {"tp": 2}),
    ("torch", {"parallel.pp": 2, "parallel.schedule": "gpipe"}, {"pp": 2, "schedule": "gpipe", "micro_batches": 2}),
    ("torch", {"parallel.pp": 2, "parallel.schedule": "1f1b"}, {"pp": 2, "schedule": "1f1b", "micro_batches": 2}),
    ("torch", {"data.micro_batch_size": 4}, {"dp": 2, "micro_batches": 4}),  # DDP no_sync on 3 of 4
    ("megatron", {"parallel.pp": 2}, {"pp": 2, "micro_batches": 2}),
    ("megatron", {"parallel.tp": 2, "data.micro_batch_size": 8}, {"tp": 2, "micro_batches": 4}),
    ("deepspeed", {"data.micro_batch_size": 4}, {"dp": 2, "gradient_accumulation_steps": 4}),
]


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TEST_TIMEOUT_S)
def test_two_process_layouts_match_one_process(single, noise, tmp_path):
    rows = _launch(tmp_path, 2, [{"backend": b, "overrides": o} for b, o, _ in TWO])
    for backend, overrides, expect in TWO:
        r = _get(rows, backend, overrides)
        assert {k: r["layout"][k] for k in expect} == expect, (backend, overrides, r["layout"])
        agree(r["losses"], single, noise.tol(OTHER_KERNELS if backend == "megatron" else SAME_MATH),
              f"{backend} {overrides}")


# (backend, overrides, backends.torch options, the layout the result must record); the pp x tp/fsdp rows are
# torchtitan's 3-D layouts: TP and FSDP2 inside each pipeline stage (suite/backends/parallel/pipeline.py)
FOUR = [
    ("torch", {"parallel.fsdp": 2, "parallel.tp": 2}, {}, {"fsdp": 2, "tp": 2, "dp": 1}),
    ("torch", {"parallel.dp": 2, "parallel.pp": 2}, {}, {"dp": 2, "pp": 2}),
    ("torch", {"parallel.pp": 2, "parallel.tp": 2, "parallel.schedule": "1f1b"}, {},
     {"pp": 2, "tp": 2, "dp": 1, "schedule": "1f1b", "sp": True, "loss_parallel": True, "micro_batches": 2}),
    ("torch", {"parallel.pp": 2, "parallel.tp": 2, "parallel.schedule": "gpipe", "parallel.sp": False,
               "parallel.loss_parallel": False}, {}, {"pp": 2, "tp": 2, "schedule": "gpipe", "sp": False}),
    ("torch", {"parallel.pp": 2, "parallel.fsdp": 2, "parallel.schedule": "1f1b"}, CLIP,
     {"pp": 2, "fsdp": 2, "dp": 1, "schedule": "1f1b", "micro_batches": 2, "micro_batch_size": 8}),
    ("torch", {"parallel.pp": 2, "parallel.fsdp": 2, "parallel.schedule": "gpipe"}, {},
     {"pp": 2, "fsdp": 2, "schedule": "gpipe"}),
    ("megatron", {"parallel.tp": 2, "parallel.pp": 2}, {}, {"tp": 2, "pp": 2, "dp": 1}),
]


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TEST_TIMEOUT_S)
def test_four_process_layouts_match_one_process(reference, clipped, tmp_path):
    """Each layout's 20-step curve against one process; torch's also its evaluation after them (under pp that
    is every rank's whole-model copy, gathered from the TP/FSDP shards of the stages: a qkv row order left
    regrouped by TP was seen to move val_loss by 1.1e-2)."""
    rows = _launch(tmp_path, 4, [{"backend": b, "overrides": o, "options": opts, "eval_at": list(EVAL_AT)}
                                 for b, o, opts, _ in FOUR])
    for backend, overrides, opts, expect in FOUR:
        r = _get(rows, backend, overrides)
        assert {k: r["layout"][k] for k in expect} == expect, (backend, overrides, r["layout"])
        want, want_evals, noise = clipped if opts == CLIP else reference
        what = f"{backend} {overrides} {opts}"
        agree(r["losses"], want, noise.tol(OTHER_KERNELS if backend == "megatron" else SAME_MATH), what)
        if backend == "torch":
            for step in (*EVAL_AT, STEPS):
                got, ref = r["evals"][str(step)]["val_loss"], want_evals[step]["val_loss"]
                assert abs(got - ref) <= noise.eval_tol(step), \
                    f"{what}: val_loss after step {step} {got} vs one process {ref} ({noise})"


CLI_LAYOUTS = [("torch", 2, "fsdp=2", {"fsdp": 2}),
               ("torch", 2, "tp=2", {"tp": 2, "sp": True, "loss_parallel": True}),
               ("torch", 2, "pp=2", {"pp": 2, "micro_batches": 2}),
               ("megatron", 2, "pp=2", {"pp": 2, "micro_batches": 2}),
               ("torch", 4, "pp=2,tp=2", {"dp": 1, "fsdp": 1, "pp": 2, "tp": 2, "schedule": "1f1b", "sp": True,
                                          "loss_parallel": True, "micro_batches": 2})]


# to the target with a layout: the claim is convergence, and the 200-step budget is what ends a run that does not
# converge; the spec's 60 s wall budget is raised so that four ranks on two busy cores are not stopped for time
CLI_SETS = {"model.n_layer": 2, "target.value": 3.2, "budget.max_steps": 200, "budget.max_train_s": 600}
CLI_GUARD_S = run_hang_guard_s(ROOT / "workloads" / "nlp" / "topics_gpt.yaml", CLI_SETS, variant="tiny")


@pytest.mark.slow
@pytest.mark.timeout(int(CLI_GUARD_S) + 60)
@pytest.mark.parametrize(("backend", "nproc", "flag", "expect"), CLI_LAYOUTS)
def test_run_with_a_layout_reaches_its_target_and_records_it(tmp_path, backend, nproc, flag, expect):
    """`trainbench run nlp/topics_gpt --nproc N --parallel ...` end to end (evaluation included: under pp it
    runs on every rank's whole-model copy, synchronised from the stages). Small and eased so it fits `make
    test`: the tiny variant with two layers, to val_loss 3.2; benchmarks/layouts.py runs the real spec."""
    sets = set_flags(CLI_SETS)
    p = trainbench("run", "nlp/topics_gpt", "--backend", backend, "--nproc", str(nproc), "--parallel", flag,
                   "--variant", "tiny", *sets, "--results", str(tmp_path), "--json", "--quiet", timeout=CLI_GUARD_S)
    assert p.returncode == 0, p.stderr[-3000:]
    from suite.results.record import read_result

    (path,) = tmp_path.rglob("*.json")
    result = read_result(path)
    assert result.status == "reached" and result.world_size == nproc
    assert {k: result.parallel[k] for k in expect} == expect
    assert result.parallel["cp"] == 1 and "schedule" in result.parallel


def test_the_matrix_says_which_layouts_each_backend_supports():
    from suite import registry
    from suite.backends.matrix import layout_matrix
    from suite.specload import load_spec as load

    specs = {n: load(registry.find_workload(n)) for n in ("nlp/topics_gpt", "cv/digits_cnn")}
    grid = layout_matrix(specs, ["torch", "deepspeed", "megatron"])
    assert grid["nlp/topics_gpt"]["torch"] == {"fsdp=2": None, "tp=2": None, "pp=2": None, "ac=full": None,
                                               "ac=selective": None, "tp=2,sp": None, "tp=2,loss_parallel": None,
                                               "pp=2,tp=2": None, "pp=2,fsdp=2": None}
    meg, ds = grid["nlp/topics_gpt"]["megatron"], grid["nlp/topics_gpt"]["deepspeed"]
    assert meg["ac=selective"] is None and meg["tp=2,sp"] is None and meg["pp=2,tp=2"] is None
    assert meg["pp=2"] is None and "not FSDP" in meg["fsdp=2"] and "not FSDP" in meg["pp=2,fsdp=2"]
    assert "zero_stage: 3" in ds["fsdp=2"] and ds["ac=full"] is None
    assert "pipeline engine" in ds["pp=2,tp=2"] and "zero_stage: 3" in ds["pp=2,fsdp=2"]
    digits = grid["cv/digits_cnn"]["torch"]
    assert digits["fsdp=2"] is None and "model.arch gpt" in digits["tp=2"] and "model.arch gpt" in digits["pp=2,fsdp=2"]
    assert "megatron" not in grid["cv/digits_cnn"]  # the pair itself is unsupported: no layouts to list


def test_the_evaluation_copy_undoes_the_qkv_regrouping():
    """TP regroups the fused qkv rows per rank; the pipeline's whole-model copy for evaluation takes them back."""
    from suite.backends.parallel.tensor import qkv_rows_by_rank

    rows = torch.arange(24.0).reshape(24, 1)  # [Q; K; V], 8 rows each
    grouped = qkv_rows_by_rank(rows, 2)
    assert grouped[:12].flatten().tolist() == [*range(0, 4), *range(8, 12), *range(16, 20)]  # [Q_0; K_0; V_0]
    assert torch.equal(qkv_rows_by_rank(grouped, 2, inverse=True), rows)
    assert torch.equal(qkv_rows_by_rank(qkv_rows_by_rank(rows[:, 0], 2), 2, inverse=True), rows[:, 0])  # bias
