"""Compare local runs against a published (imported) MLPerf system: `compare --baseline mlperf:SUBMITTER/SYSTEM`.

The published system's runs (imported by `results import-mlperf`) are the baseline side of every workload the
candidate ran that the system also ran, whatever the hardware and backend (comparing across them is the point).
The verdict is today's: the same statistics per metric (`tta._compare_pair`). A published system is never like
for like with a local runner, so the comparison key is not enforced; instead the report says plainly where the two
differ in global batch size or precision (and so in what a time to target means).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from suite.compare import tta
from suite.compare.model import Report, Settings
from suite.results.baselines import load_paths
from suite.results.record import ResultError, read_result
from suite.results.runfiles import RunRecord, Side, SideKey

PREFIX = "mlperf:"
SPEC = "published"  # one spec hash for both sides: their own hashes (local spec vs mlperf round) never match


def is_published(ref: str) -> bool:
    return ref.startswith(PREFIX)


def _side(key: SideKey, records: list[RunRecord]) -> Side:
    side = Side(key)
    for r in records:
        side.by_spec[SPEC].append(r.figures)
        side.workload_version[SPEC] = r.workload_version
        side.noise_floor[SPEC] = r.noise_floor
        side.sources.append(r.source)
    return side


def _batch_and_precision(source: str) -> tuple[float | None, str]:
    try:
        r = read_result(Path(source))
    except ResultError:
        return None, "unknown"
    if r.imported is not None:
        return r.imported.global_batch_size, str(r.config.get("precision", "unknown"))
    spec = r.config.get("spec") if isinstance(r.config.get("spec"), dict) else {}
    data = spec.get("data") if isinstance(spec.get("data"), dict) else {}
    bs = data.get("batch_size")
    return (float(bs) if isinstance(bs, int | float) else None), str(r.config.get("precision", "fp32"))


def like_for_like(base: list[RunRecord], cand: list[RunRecord]) -> list[str]:
    """What makes the two sides measure different things: global batch size and precision, one line each."""
    b_bs, b_prec = _batch_and_precision(base[0].source)
    c_bs, c_prec = _batch_and_precision(cand[0].source)
    out = []
    if b_bs != c_bs:
        out.append(f"not like for like: global batch size {_n(b_bs)} (published) vs {_n(c_bs)} (candidate); the number "
                   "of samples to converge depends on it")
    if b_prec != c_prec:
        out.append(f"not like for like: precision {b_prec} (published) vs {c_prec} (candidate)")
    return out


def _n(v: float | None) -> str:
    return "unknown" if v is None else f"{v:g}"


def compare_published(system: str, published_root: Path, candidate: Iterable[Path], settings: Settings | None = None,
                      strict: bool = False) -> Report:
    """The candidate's runs against the published system's, one pair per workload both ran. ValueError names
    the system when it is not among the imported results."""
    s = settings or Settings()
    name = system.removeprefix(PREFIX)
    if not published_root.exists():
        raise ValueError(f"--published {published_root}: no such folder (where `results import-mlperf` wrote)")
    b = load_paths([published_root], strict, False)
    c = load_paths(candidate, strict, False)
    mine = [r for r in b.records if r.imported_system == name]
    if not mine:
        known = sorted({str(r.imported_system) for r in b.records if r.imported_system})
        raise ValueError(f"--baseline {PREFIX}{name}: no imported system of that name under {published_root}"
                         + (f"; imported: {', '.join(known[:12])}" if known else " (run `trainbench results "
                            "import-mlperf` first)"))
    cands = [r for r in c.records if r.imported_system is None]
    pairs = []
    for workload in sorted({r.key.workload for r in cands}):
        base_runs = [r for r in mine if r.key.workload == workload]
        cand_runs = [r for r in cands if r.key.workload == workload]
        by_hw: dict[tuple[str, str], list[RunRecord]] = {}
        for r in cand_runs:
            by_hw.setdefault((r.key.hardware, r.key.backend), []).append(r)
        for (hardware, backend), runs in sorted(by_hw.items()):
            key = SideKey(f"{hardware} vs {name}", workload, backend)
            if not base_runs:
                pairs.append(tta._unpaired(key, None, _side(key, runs), SPEC,
                                           f"{name} published no {workload} result", s))
                continue
            pair = tta._compare_pair(key, _side(key, base_runs), _side(key, runs), SPEC, s)
            pair.warnings = like_for_like(base_runs, runs) + pair.warnings
            pairs.append(pair)
    pairs.sort(key=lambda p: (p.severity, p.workload, p.backend, p.hardware))
    return Report(s, pairs, b.errors + c.errors, len(mine), c.files)
