"""The MLPerf v5.1 subset the tests use (tests/mlperf/data/mlperf_v5.1_subset.tar.gz), unpacked, and how it was made.

`unpack(tmp)` gives a writable copy (the result summarizer writes scaling.json into what it reads). `build` made the
archive from a copy of mlcommons/training_results_v5.1 (see tests/mlperf/data/PROVENANCE.md), run by hand, never by
the tests: `python tests/support/mlperf_fixture.py ../shared/mlperf/training_results_v5.1`.
Real logs are copied byte for byte; the four Krai logs named in MODIFIED are changed as written there, so that
the subset holds the dirt a scorer must handle (a truncated log, a run that did not converge, a non-compliant run).
"""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path

ROOT = "training_results_v5.1"
ARCHIVE = Path(__file__).resolve().parents[1] / "mlperf" / "data" / "mlperf_v5.1_subset.tar.gz"
COPIED = {  # submitter -> systems whose listed benchmark folders are copied whole
    "AMD": {"MI355X_EPYC_9575F_pytorch": ["llama2_70b_lora", "llama31_8b"]},
    "NVIDIA": {"tyche_ngpu72_ngc25.09_nemo": ["flux1"], "tyche_ngpu8_ngc25.03_dgl": ["rgat"]},
    "Krai": {"PowerEdge-XE9680-MI300X-192GB_n1_v5.1": ["llama2_70b_lora"],
             "PowerEdge-XE9680-MI300X-192GB_n1_v5.0": ["llama2_70b_lora"]},
}
_V51 = "Krai/results/PowerEdge-XE9680-MI300X-192GB_n1_v5.1/llama2_70b_lora"
_V50 = "Krai/results/PowerEdge-XE9680-MI300X-192GB_n1_v5.0/llama2_70b_lora"


def _drop_run_stop(text: str) -> str:  # a log cut off before the run ended
    return "".join(line for line in text.splitlines(keepends=True) if '"key": "run_stop"' not in line)


def _aborted(text: str) -> str:  # a run that did not converge: MLPerf's run_stop status "aborted"
    return text.replace('"status": "success"', '"status": "aborted"')


def _lora_rank_8(text: str) -> str:  # the closed rules fix lora_rank at 16: the checker rejects 8
    return text.replace('"key": "lora_rank", "value": 16', '"key": "lora_rank", "value": 8')


MODIFIED = {f"{_V51}/result_2.txt": _drop_run_stop, f"{_V50}/result_1.txt": _aborted,
            f"{_V50}/result_4.txt": _lora_rank_8, f"{_V50}/result_6.txt": _drop_run_stop}


def build(src: Path, out: Path) -> None:
    with tarfile.open(out, "w:gz", compresslevel=9) as tar:
        def add(rel: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"{ROOT}/{rel}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))

        add("LICENSE.md", (src / "LICENSE.md").read_bytes())
        for submitter, systems in COPIED.items():
            for system, benchmarks in systems.items():
                add(f"{submitter}/systems/{system}.json", (src / submitter / "systems" / f"{system}.json").read_bytes())
                for bench in benchmarks:
                    folder = src / submitter / "results" / system / bench
                    for f in sorted(folder.iterdir()):
                        rel = f"{submitter}/results/{system}/{bench}/{f.name}"
                        data = f.read_bytes()
                        if rel in MODIFIED:
                            changed = MODIFIED[rel](data.decode("utf-8")).encode("utf-8")
                            assert changed != data, f"{rel}: the modification changed nothing"
                            data = changed
                        add(rel, data)


def unpack(dest: Path) -> Path:
    """The subset unpacked under dest; returns dest/training_results_v5.1 (three submitter folders)."""
    with tarfile.open(ARCHIVE, "r:gz") as tar:
        tar.extractall(dest, filter="data")
    return dest / ROOT


if __name__ == "__main__":
    build(Path(sys.argv[1]), ARCHIVE)
