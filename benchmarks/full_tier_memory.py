"""Device memory of each full-tier spec at its micro-batch, from a measurement on the CPU: the bytes autograd
saves for backward per sample (counted with saved_tensors_hooks under the spec's autocast dtype, one small
batch), times the micro-batch, plus weights, gradients and optimizer state. docs/workloads.md quotes it. GPT specs
also get the estimator's figure (suite/measure/memory.py, which tests/measure/test_memory_estimate.py holds to torch's own
count); their CPU measurement at 1 x 1024 bf16 is slow on a shared machine.

    PYTHONPATH=. python benchmarks/full_tier_memory.py [--out benchmarks/out/full_tier_memory.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from suite import registry
from suite.algorithms import precision as recipes
from suite.measure import memory
from suite.specload import load_spec

ROOT = Path(__file__).resolve().parents[1]
# what one small measurement batch looks like for each model (batch 2, GPT-2 1; the model's real input shape)
PROBES = {
    "cv/cifar10_resnet": lambda m: (torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))),
    "cv/imagenet_resnet50": lambda m: (torch.randn(2, 3, 224, 224), torch.randint(0, 1000, (2,))),
    "nlp/gpt2_124m": lambda m: (torch.randint(0, 50257, (1, 1024)), torch.randint(0, 50257, (1, 1024))),
}
META = {
    "cv/cifar10_resnet": {"input_shape": (3, 32, 32), "num_classes": 10},
    "cv/imagenet_resnet50": {"input_shape": (3, 224, 224), "num_classes": 1000},
    "nlp/gpt2_124m": {"vocab_size": 50257},
}


def saved_bytes(model: torch.nn.Module, batch, loss_fn, autocast_dtype) -> int:
    seen: dict[tuple[int, int], int] = {}  # a tensor saved by two ops (conv out -> BN, ReLU) is stored once
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}  # counted in the state, not here

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            seen[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        return t

    ctx = torch.autocast("cpu", dtype=autocast_dtype) if autocast_dtype else torch.autocast("cpu", enabled=False)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx:
        loss = loss_fn(model, batch)
    loss.backward()
    return sum(seen.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None, help="one workload name")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "full_tier_memory.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    rows = {}
    for name, probe in PROBES.items():
        if args.only and name != args.only:
            continue
        spec = load_spec(registry.workload_files()[name])
        comp = registry.model_component(spec.model.arch)
        model = comp.build(comp.Config.model_validate(spec.model.params()), META[name])
        rec = recipes.recipe(spec.precision or "fp32")
        batch = probe(model)
        v = META[name].get("vocab_size")

        def loss_fn(m, b, v=v):
            x, y = b
            out = m(x)
            if v:
                out = out[..., :v]
            return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))

        per_sample = saved_bytes(model, batch, loss_fn, rec.autocast_dtype) / batch[0].shape[0]
        params = sum(p.numel() for p in model.parameters())
        opt_slots = {"adamw": 2, "adam": 2, "lars": 1}.get(spec.optimizer.name, 1)  # SGD-like: one momentum
        state = params * 4 * (2 + opt_slots)  # fp32 weights, fp32 grads, optimizer slots
        micro = spec.data.micro_batch_size or spec.data.batch_size
        rows[name] = {"precision": rec.name, "micro_batch": micro, "params": params,
                      "saved_per_sample_bytes": per_sample, "state_bytes": state,
                      "estimate_gb": (per_sample * micro + state) / 1e9}
        if spec.model.arch == "gpt":
            rows[name]["estimator"] = memory.estimate_spec(spec).as_dict()
        print(f"{name}: {rec.name}, micro-batch {micro}: {per_sample / 1e6:.1f} MB saved per sample, "
              f"{state / 1e9:.2f} GB weights+grads+optimizer -> {rows[name]['estimate_gb']:.1f} GB")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    args.out.write_text(json.dumps({**old, **rows}, indent=1))


if __name__ == "__main__":
    main()
