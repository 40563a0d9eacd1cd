"""Host memory of a rank while a Hugging Face checkpoint loads under DeepSpeed ZeRO-3 (2 gloo ranks on the CPU):
streamed into its partitions (suite/backends/deepspeed/zero3.py) against the whole model in every rank
(hf_checkpoint.load_llama, what ran before). Each way in fresh processes; per rank, the growth over the load of
its anonymous resident memory (RssAnon, sampled every millisecond: what the process itself allocated; safetensors
maps the files, and the pages it touches are page cache, shared and reclaimable, reported apart as RssFile) and of
VmHWM (peak RSS, both kinds, reset before the load), with hf_tensors.Reads' count of checkpoint bytes held at once
and suite/measure/memory_lora.py's `load_peak_bytes` estimate.

    PYTHONPATH=. python benchmarks/zero3_load_memory.py [--out benchmarks/out/zero3_load_memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# ~87 M parameters, bf16 on disk: ~175 MB (a Llama-2-vocabulary model of 6 layers)
SHAPE = {"n_layer": 6, "d_model": 768, "n_head": 12, "n_kv_head": 4, "ffn_dim": 2048, "vocab_size": 32000,
         "seq_len": 64, "rope_scaling": None}


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


class _Sampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_anon, self.peak_file, self.stop = 0, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            s = _status()
            self.peak_anon, self.peak_file = max(self.peak_anon, s["RssAnon"]), max(self.peak_file, s["RssFile"])
            time.sleep(0.001)


def _load(mode: str, folder: Path, cfg: object, deepspeed: object, config: dict, reads: object) -> torch.nn.Module:
    from suite.backends.deepspeed import zero3 as hf_zero3
    from suite.models.hf import checkpoint as hf_checkpoint

    if mode == "stream":
        with hf_zero3.zero3_build(deepspeed, config, None):
            return hf_zero3.load_partitioned(folder, cfg, reads=reads)  # type: ignore[arg-type]
    return hf_checkpoint.load_llama(folder, cfg, reads=reads)  # type: ignore[arg-type]


def rank_main(mode: str, folder: str, out: str) -> None:
    torch.set_num_threads(1)
    import torch.distributed as dist

    from suite.backends.deepspeed.backend import Options, _import_deepspeed, _skip_shm_build, ds_config
    from suite.measure import memory_lora
    from suite.models.hf import checkpoint as hf_checkpoint
    from suite.models.hf import tensors as hf_tensors
    from suite.models.llama import config as llama_config

    deepspeed = _import_deepspeed("cpu")
    _skip_shm_build()
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    config = ds_config(Options(zero_stage=3), "fp32", global_batch=world, dp=world)
    cfg = hf_checkpoint.config_for(folder, llama_config.Config(**SHAPE))
    tiny = Path(folder).parent / "tiny"
    # the same load of a tiny checkpoint first: what the first load imports (torch's meta-device refs, DeepSpeed's
    # partitioning) is a one-time cost of the process, not of the checkpoint
    _load(mode, tiny, hf_checkpoint.config_for(tiny), deepspeed, config, hf_tensors.Reads())
    reads = hf_tensors.Reads()
    dist.barrier()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
    before, sampler = _status(), _Sampler()
    sampler.start()
    t0 = time.perf_counter()
    model = _load(mode, Path(folder), cfg, deepspeed, config, reads)
    load_s = time.perf_counter() - t0
    sampler.stop.set()
    sampler.join()
    after = _status()
    held = sum(getattr(p, "ds_tensor", p).numel() * p.element_size() for p in model.parameters())
    row = {"mode": mode, "rank": dist.get_rank(), "load_s": load_s, "model_bytes_held": held,
           "anon_growth_peak": sampler.peak_anon - before["RssAnon"], "anon_growth_end": after["RssAnon"] - before["RssAnon"],
           "file_growth_peak": sampler.peak_file - before["RssFile"], "hwm_growth": after["VmHWM"] - before["VmHWM"],
           "reads_peak": reads.peak, "reads_total": reads.total,
           "estimate": memory_lora.load_peak_bytes(cfg, "bfloat16", world if mode == "stream" else 1)}
    Path(out).with_suffix(f".{dist.get_rank()}.json").write_text(json.dumps(row))
    dist.barrier()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "zero3_load_memory.json"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    from suite.models.hf import checkpoint as hf_checkpoint
    from suite.models.llama import config as llama_config
    from suite.models.llama import model as llama

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        model = llama.build(llama_config.Config(**SHAPE), {}).to(torch.bfloat16)
        hf_checkpoint.save_llama(model, folder, max_shard_bytes=50_000_000)
        on_disk = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
        largest = max(p.numel() * p.element_size() for p in model.parameters())
        del model
        hf_checkpoint.save_llama(llama.build(llama_config.Config(preset="llama3.1-tiny"), {}), Path(tmp) / "tiny")
        rows = []
        for mode in ("whole", "stream"):
            stem = Path(tmp) / mode
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                   __file__, "--rank-main", mode, str(folder), str(stem)]
            subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True)
            rows += [json.loads(stem.with_suffix(f".{r}.json").read_text()) for r in range(2)]
    mb = 1e6
    print(f"checkpoint {on_disk / mb:.0f} MB on disk (bf16), largest tensor {largest / mb:.1f} MB; 2 ranks")
    print(f"{'mode':7} {'rank':>4} {'load s':>7} {'held MB':>8} {'anon peak+':>10} {'anon end+':>9} "
          f"{'file peak+':>10} {'HWM+':>7} {'reads peak':>10} {'reads total':>11} {'estimate':>8}")
    for r in rows:
        print(f"{r['mode']:7} {r['rank']:>4} {r['load_s']:7.2f} {r['model_bytes_held'] / mb:8.1f} "
              f"{r['anon_growth_peak'] / mb:10.1f} {r['anon_growth_end'] / mb:9.1f} {r['file_growth_peak'] / mb:10.1f} "
              f"{r['hwm_growth'] / mb:7.1f} {r['reads_peak'] / mb:10.1f} {r['reads_total'] / mb:11.1f} "
              f"{r['estimate'] / mb:8.1f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"checkpoint_bytes": on_disk, "largest_tensor_bytes": largest,
                                          "ranks": rows}, indent=2) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-main":
        rank_main(*sys.argv[2:5])
    else:
        main()
