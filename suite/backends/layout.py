"""Process layouts as data: `--parallel dp=2,fsdp=4,tp=2,pp=2,cp=1,ep=2` <-> the spec's `parallel:` block.

A layout names a degree per dimension; their product must equal the process count (`dp` left out takes the
rest). The checks here are pure (no process group, no framework import), so a bad layout is refused before
anything starts (suite/execution/plan.py), and backends read the same resolved `Layout`. Also here: the
micro-batch arithmetic every backend shares, and the torchrun arguments of a (multi-node) launch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

DIMS = ("dp", "fsdp", "tp", "pp", "cp", "ep")
OPTIONS = ("schedule", "ac", "sp", "loss_parallel", "tables")


def _is_model(arch: str, name: str) -> bool:
    """The spec's model.arch is the suite's model `name` (the registry's entry of that name), by name or by import
    path."""
    if arch == name:
        return True
    from suite import registry

    if arch in registry.MODELS or arch == registry.MODELS.get(name):  # the registry's strings: nothing imported
        return registry.MODELS.get(arch, arch) == registry.MODELS.get(name)
    try:
        return registry.model_component(arch) is registry.model_component(name)
    except registry.RegistryError:
        return False


def is_gpt(arch: str) -> bool:
    """The spec's model is the suite GPT: the model the TP/PP plans are written for."""
    return _is_model(arch, "gpt")


def is_llama(arch: str) -> bool:
    """The spec's model is the suite Llama (suite/models/llama/model.py)."""
    return _is_model(arch, "llama")


def is_pretrained_llama(arch: str) -> bool:
    """The spec's model is `hf_llama` (suite/models/hf/pretrained.py): the suite Llama from a checkpoint, maybe LoRA."""
    return _is_model(arch, "hf_llama")


class LayoutError(ValueError):
    """An impossible layout; the message names the flag or field to change."""


@dataclass(frozen=True)
class Layout:
    dp: int = 1
    fsdp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1  # expert parallel: like dp for the dense parameters, the experts split over the ep group
    schedule: str = "1f1b"
    ac: str = "none"
    sp: bool = False  # sequence parallelism over the tp group (norms and residual stream sharded by sequence)
    loss_parallel: bool = False  # vocab-parallel LM head and cross-entropy over the tp group

    @property
    def world(self) -> int:
        return self.dp * self.fsdp * self.tp * self.pp * self.cp * self.ep

    @property
    def data_parallel(self) -> int:
        """Ranks that read different data (replicas, shards, expert-parallel peers); TP and PP peers read the same
        batch."""
        return self.dp * self.fsdp * self.ep

    def describe(self) -> str:
        return ",".join(f"{d}={getattr(self, d)}" for d in DIMS if d != "ep" or self.ep > 1)

    def record(self) -> dict[str, Any]:
        """The layout as a result records it; `ep` only when used, so that a result without expert parallelism
        keeps the comparison key (suite/results/key.py) of the results recorded before it existed."""
        out = asdict(self)
        if self.ep == 1:
            del out["ep"]
        return out


def parse_flag(text: str) -> dict[str, Any]:
    """`dp=2,fsdp=4,tp=2` -> {"parallel.dp": 2, ...}: --set overrides of the spec's parallel block."""
    out: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in (*DIMS, *OPTIONS):
            raise LayoutError(f"--parallel {text!r}: expected DIM=N[,DIM=N...] with DIM one of {', '.join(DIMS)} "
                              "(and schedule=gpipe|1f1b|interleaved, ac=none|selective|full, sp=true|false, "
                              "loss_parallel=true|false, tables=auto|row_wise|...), e.g. --parallel fsdp=2,tp=2")
        if key in DIMS:
            try:
                out[f"parallel.{key}"] = int(value)
            except ValueError:
                raise LayoutError(f"--parallel {part!r}: {key} must be a whole number of processes") from None
            if out[f"parallel.{key}"] < 1:
                raise LayoutError(f"--parallel {part!r}: {key} must be at least 1")
        else:
            out[f"parallel.{key}"] = value.strip()
    return out


def resolve(parallel: Any, world: int) -> Layout:
    """The layout of `world` processes that the spec's `parallel` block (None: all data parallel) asks for."""
    if parallel is None:
        return Layout(dp=world)
    fixed = parallel.fsdp * parallel.tp * parallel.pp * parallel.cp * parallel.ep
    given = ",".join(f"{d}={getattr(parallel, d)}" for d in DIMS if getattr(parallel, d) not in (None, 1))
    if parallel.dp is None:
        if world % fixed:
            raise LayoutError(f"parallel {given or 'dp=1'}: the degrees multiply to {fixed}, which does not divide "
                              f"the {world} processes (--nproc x --nnodes); change --parallel or --nproc")
        dp = world // fixed
    else:
        dp = parallel.dp
        if dp * fixed != world:
            raise LayoutError(f"parallel {given}: the degrees multiply to {dp * fixed}, not the {world} processes "
                              "(--nproc x --nnodes); their product must equal the process count")
    if parallel.cp != 1:
        raise LayoutError(f"parallel cp={parallel.cp}: context parallelism is not implemented (use cp=1)")
    for name in ("sp", "loss_parallel"):
        if getattr(parallel, name) and parallel.tp == 1:
            raise LayoutError(f"parallel.{name}: shards over the tensor-parallel group, so it needs parallel.tp > 1 "
                              f"(e.g. --parallel tp=2,{name}=true)")
    # torchtitan's defaults: with tensor parallelism, sequence parallel norms and loss parallel are on
    sp = parallel.tp > 1 if parallel.sp is None else parallel.sp
    loss_parallel = parallel.tp > 1 if parallel.loss_parallel is None else parallel.loss_parallel
    return Layout(dp=dp, fsdp=parallel.fsdp, tp=parallel.tp, pp=parallel.pp, cp=parallel.cp, ep=parallel.ep,
                  schedule=parallel.schedule, ac=parallel.ac, sp=sp, loss_parallel=loss_parallel)


def micro_batches(spec: Any, layout: Layout) -> tuple[int, int]:
    """(micro-batch size per data-parallel rank, micro-batches per optimizer step) for this spec and layout.

    Without `data.micro_batch_size` the whole local batch is one micro-batch, except under pipeline
    parallelism, where the local batch is cut into `pp` micro-batches (the fewest that keep every stage busy).
    """
    bs = spec.data.batch_size
    dpw = layout.data_parallel
    if bs % dpw:
        raise LayoutError(f"data.batch_size {bs} does not split over {dpw} data-parallel ranks "
                          f"(parallel {layout.describe()})")
    local = bs // dpw
    micro = spec.data.micro_batch_size
    if micro is None:
        micro = local // layout.pp if layout.pp > 1 and local % layout.pp == 0 else local
    if local % micro:
        raise LayoutError(f"data.micro_batch_size {micro} does not divide the local batch {local} "
                          f"(data.batch_size {bs} / {dpw} data-parallel ranks); change data.micro_batch_size")
    return micro, local // micro


def check(spec: Any, world: int) -> str | None:
    """None when the spec's layout and micro-batching fit `world` processes, else why not."""
    try:
        layout = resolve(spec.parallel, world)
        micro_batches(spec, layout)
    except LayoutError as e:
        return str(e)
    return None


def torchrun_args(nnodes: int = 1, node_rank: int = 0, rdzv_endpoint: str | None = None) -> list[str]:
    """torchrun's rendezvous arguments (before `--nproc_per_node`): one node standalone, or several meeting at
    node 0's HOST:PORT.

    Every node runs the same command with its own --node-rank (static rendezvous: node R's processes get the
    global ranks R*nproc .. R*nproc+nproc-1, so rank 0, which writes the result, is on node 0).
    """
    if nnodes < 1:
        raise LayoutError(f"--nnodes {nnodes}: must be at least 1")
    if not 0 <= node_rank < nnodes:
        raise LayoutError(f"--node-rank {node_rank}: must be in 0..{nnodes - 1} for --nnodes {nnodes} "
                          "(node 0 is the one at --rdzv-endpoint)")
    if nnodes == 1 and rdzv_endpoint is None:
        return ["--standalone"]
    if rdzv_endpoint is None:
        raise LayoutError(f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT: node 0's address and a free port, "
                          "reachable from every node, the same on every node (e.g. --rdzv-endpoint 10.0.0.1:29500)")
    host, _, port = rdzv_endpoint.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [IPv6]:PORT
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() or c in "/[]" for c in host):
        raise LayoutError(f"--rdzv-endpoint {rdzv_endpoint!r}: expected HOST:PORT of node 0 (a host name or IP "
                          "address, a port in 1..65535), reachable from every node (e.g. --rdzv-endpoint "
                          "10.0.0.1:29500)")
    return [f"--nnodes={nnodes}", f"--node_rank={node_rank}", f"--master_addr={host}", f"--master_port={port}"]
