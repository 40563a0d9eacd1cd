"""OGB's ogbg-molpcba (Hu et al. 2020, MIT): 437,929 molecules, 128 binary assays with missing labels,
scaffold split; the metric is mean average precision over assays (OGB's Evaluator).

Reads OGB's own on-disk layout, as its downloader leaves it (`ogbg_molpcba/`):
  raw/num-node-list.csv.gz, raw/num-edge-list.csv.gz   one count per graph
  raw/node-feat.csv.gz (N x 9), raw/edge.csv.gz (E x 2, node numbers local to the graph, one direction),
  raw/edge-feat.csv.gz (E x 3), raw/graph-label.csv.gz (G x 128, empty = unlabelled)
  split/scaffold/{train,valid,test}.csv.gz              graph indices
Molecule edges are stored once; OGB adds the reverse edge (`add_inverse_edge`), and so does this reader.
`trainbench data prepare ogbg_molpcba --from PATH` checks the files and writes a `trainbench-index.npz`
beside them (or under $TRAINBENCH_DATA) so that later loads skip the CSV parse.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from suite.data.base import DataMissing
from suite.data.graph.graphs import GraphSplits, PackedGraphs
from suite.data.graph.ogbg_config import Config
from suite.data.locate import find_dir, link_local, local_hint, named_dir
from suite.registry import Component

RAW = ("num-node-list.csv.gz", "num-edge-list.csv.gz", "node-feat.csv.gz", "edge.csv.gz", "edge-feat.csv.gz",
       "graph-label.csv.gz")
# ogb.utils.features.get_atom_feature_dims() / get_bond_feature_dims()
ATOM_DIMS = [119, 5, 12, 12, 10, 6, 6, 2, 2]
BOND_DIMS = [5, 6, 2]
INDEX = "trainbench-index.npz"
URL = "http://snap.stanford.edu/ogb/data/graphproppred/csv_mol_download/pcba.zip"


def locate(cfg: Config) -> Path:
    return find_dir("ogbg_molpcba", [Path(cfg.path) if cfg.path else None, named_dir("ogbg_molpcba")],
                    [f"raw/{f}" for f in RAW] + [f"split/{cfg.split}/train.csv.gz"], local_hint("ogbg_molpcba"))


def _csv(path: Path, dtype: type, cols: int | None = None) -> np.ndarray:
    with gzip.open(path, "rt") as f:
        text = f.read()
    if not text.strip():
        return np.zeros((0, cols) if cols else 0, dtype=dtype)
    if dtype is np.float32:  # labels: empty fields are missing labels -> NaN
        rows = [[float(v) if v else np.nan for v in line.split(",")] for line in text.splitlines() if line]
        return np.array(rows, dtype=np.float32)
    arr = np.array(text.replace("\n", ",").strip(",").split(","), dtype=np.int64)
    return arr.reshape(-1, cols) if cols else arr


def read_raw(folder: Path) -> dict[str, np.ndarray]:
    raw = folder / "raw"
    n_nodes = _csv(raw / RAW[0], np.int64)
    n_edges = _csv(raw / RAW[1], np.int64)
    x = _csv(raw / RAW[2], np.int64, len(ATOM_DIMS))
    edges = _csv(raw / RAW[3], np.int64, 2)
    eattr = _csv(raw / RAW[4], np.int64, len(BOND_DIMS))
    y = _csv(raw / RAW[5], np.float32)
    g = n_nodes.shape[0]
    checks = [(n_edges.shape[0] == g, "num-edge-list and num-node-list differ in length"),
              (x.shape[0] == n_nodes.sum(), f"node-feat has {x.shape[0]} rows, num-node-list sums to {n_nodes.sum()}"),
              (edges.shape[0] == n_edges.sum(), f"edge.csv has {edges.shape[0]} rows, num-edge-list sums to {n_edges.sum()}"),
              (eattr.shape[0] == edges.shape[0], "edge-feat and edge differ in length"),
              (y.shape[0] == g, f"graph-label has {y.shape[0]} rows for {g} graphs")]
    for ok, msg in checks:
        if not ok:
            raise DataMissing(f"{raw}: {msg}")
    # add the inverse of every edge, interleaved per graph so each graph's edges stay contiguous
    edge_ptr = np.concatenate([[0], np.cumsum(n_edges)])
    graph_of_edge = np.repeat(np.arange(g), n_edges)
    both = np.concatenate([edges, edges[:, ::-1]])
    both_attr = np.concatenate([eattr, eattr])
    order = np.argsort(np.concatenate([graph_of_edge, graph_of_edge]), kind="stable")
    splits = {}
    split_dir = folder / "split"
    for sub in sorted(p for p in split_dir.iterdir() if p.is_dir()) if split_dir.exists() else []:
        for part in ("train", "valid", "test"):
            f = sub / f"{part}.csv.gz"
            if f.exists():
                splits[f"split_{sub.name}_{part}"] = _csv(f, np.int64)
    return {"x": x, "edge_index": both[order].T.copy(), "edge_attr": both_attr[order],
            "node_ptr": np.concatenate([[0], np.cumsum(n_nodes)]), "edge_ptr": 2 * edge_ptr, "y": y, **splits}


def _index_path(folder: Path) -> Path:
    return folder / INDEX


def load_arrays(folder: Path) -> dict[str, np.ndarray]:
    for idx in (_index_path(folder), named_dir("ogbg_molpcba") / INDEX):
        if idx.exists():
            with np.load(idx) as z:
                return {k: z[k] for k in z.files}
    return read_raw(folder)


def load(cfg: Config) -> GraphSplits:
    folder = locate(cfg)
    a = load_arrays(folder)
    graphs = PackedGraphs(a["x"], a["edge_index"], a["edge_attr"], a["node_ptr"], a["edge_ptr"], a["y"])
    key_train, key_val = f"split_{cfg.split}_train", f"split_{cfg.split}_{cfg.val_split}"
    if key_train not in a or key_val not in a:
        raise DataMissing(f"{folder}: split {cfg.split!r} needs split/{cfg.split}/train.csv.gz and "
                          f"{cfg.val_split}.csv.gz")
    train_idx, val_idx = a[key_train][: cfg.train_limit], a[key_val][: cfg.val_limit]
    for name, idx in (("train", train_idx), ("val", val_idx)):
        if idx.size and (idx.min() < 0 or idx.max() >= len(graphs)):
            raise DataMissing(f"{folder}: {name} split names graph {idx.max()} of {len(graphs)}")
    train, val = graphs.subset(train_idx), graphs.subset(val_idx)
    return GraphSplits(train, val, meta={
        "atom_feature_dims": ATOM_DIMS, "bond_feature_dims": BOND_DIMS, "task_type": "multilabel",
        "num_tasks": int(graphs.y.shape[1]), **train.stats(), "source": str(folder), "license": "MIT"})


def prepare(source: Path | None) -> str:
    if source is None:
        from suite.data.download import fetch_and_extract

        fetch_and_extract(URL, named_dir("ogbg_molpcba").parent / "ogbg_molpcba_download")
        source = next((named_dir("ogbg_molpcba").parent / "ogbg_molpcba_download").glob("*/raw")).parent
    folder = locate(Config(path=str(source)))
    arrays = read_raw(folder)
    if folder.resolve() != named_dir("ogbg_molpcba").resolve():
        link_local("ogbg_molpcba", folder)
    target = _index_path(folder)
    try:
        np.savez(target, **arrays)  # type: ignore[arg-type]
    except OSError:  # a read-only copy: keep the index in the data root instead
        target = named_dir("ogbg_molpcba") / INDEX
        np.savez(target, **arrays)  # type: ignore[arg-type]
    g = arrays["node_ptr"].shape[0] - 1
    return f"ogbg_molpcba: {folder} ({g} graphs, {arrays['y'].shape[1]} tasks), index {target}"


COMPONENT = Component(Config, load=load, prepare=prepare)
