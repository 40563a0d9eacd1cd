"""ImageNet through NVIDIA DALI (suite/data/vision/imagenet_dali.py), on DALI's CPU backend: the same labels, shapes and
validation tensors as the Pillow path, disjoint shards per rank, the decoder recorded; and `data.decode: dali`
without DALI refused by name. The GPU ("mixed" nvJPEG) graph is the same graph with device_id set; it needs a
CUDA device, which these machines do not have."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from support.datafiles import write_imagefolder
from support.promised import require
from typer.testing import CliRunner

from suite import registry
from suite.cli import app
from suite.spec import SpecError
from suite.specload import load_spec
from suite.workloads.contract import Context

require("nvidia.dali")
require("PIL")

from suite.data.vision import imagenet_dali  # noqa: E402

torch.set_num_threads(1)
SPEC = registry.workload_files()["cv/imagenet_resnet50"]
# the Pillow path and DALI decode with libjpeg-turbo identically (checked: 0 difference) and resample with the
# same antialiased bilinear filter at the same geometry; each rounds its uint8 resize output on its own, so a
# pixel may differ by one grey level: 1/255 over the smallest std (0.224) in normalised units
ONE_LEVEL = 1 / 255 / 0.224


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return write_imagefolder(tmp_path_factory.mktemp("dali") / "inet", classes=3, per_class=4)


def workload(root: Path, decode: str, device: str = "cpu", **extra: str):
    spec = load_spec(SPEC, {"data.path": str(root), "data.decode": decode, **extra}, "tiny")
    return registry.task_class(spec.task)(spec, Context(root, 0, torch.device(device)))


def test_validation_tensors_and_labels_agree_with_the_pillow_path(root):
    dali, pillow = workload(root, "dali"), workload(root, "pillow")
    assert dali.decode_mode() == "dali" and pillow.decode_mode() == "pillow"
    for _ in range(2):  # a second evaluation reads the whole set again (DALI's iterator resets itself)
        got, ref = list(dali._eval_batches(5)), list(pillow._eval_batches(5))
        assert [x.shape[0] for x, _ in got] == [x.shape[0] for x, _ in ref] == [5, 5, 2]  # every image once
        for (xd, yd), (xr, yr) in zip(got, ref, strict=True):
            assert yd.dtype == yr.dtype == torch.int64 and torch.equal(yd, yr)
            assert xd.dtype == xr.dtype == torch.float32 and xd.shape == xr.shape == (xd.shape[0], 3, 32, 32)
            diff = (xd - xr).abs()
            assert float(diff.max()) <= ONE_LEVEL * 1.01, float(diff.max())
            assert float(diff.mean()) < 0.01, float(diff.mean())


def test_train_batches_have_the_pillow_paths_shapes_labels_and_statistics(root):
    dali, pillow = workload(root, "dali"), workload(root, "pillow")
    stream, ref = dali.train_batches(0, 1), pillow.train_batches(0, 1)
    means: dict[str, dict[int, list[float]]] = {"dali": {}, "pillow": {}}
    for _ in range(9):  # endless: 4 images a batch, 12 images an epoch, three epochs
        for name, (x, y) in (("dali", next(stream)), ("pillow", next(ref))):
            assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32
            assert y.dtype == torch.int64 and y.shape == (4,) and set(y.tolist()) <= {0, 1, 2}
            for img, label in zip(x, y.tolist(), strict=True):
                means[name].setdefault(label, []).append(float(img.mean()))
    assert set(means["dali"]) == set(means["pillow"]) == {0, 1, 2}
    # crops of a class's images, normalised alike: the same mean level per class (classes are 120 grey levels,
    # ~2 in normalised units, apart), so a label attached to another class's image would show
    for c in range(3):
        d, p = (sum(v) / len(v) for v in (means["dali"][c], means["pillow"][c]))
        assert abs(d - p) < 0.2, (c, d, p)


def test_each_rank_reads_its_own_shard(root):
    """Labels replaced by each file's index, so the labels a rank sees name the files it read."""
    w = workload(root, "dali")
    w.splits.train = [(rel, i) for i, (rel, _) in enumerate(w.splits.train)]
    n = len(w.splits.train)
    for epoch_pass in range(2):
        shards = []
        for rank in range(2):
            pipe = imagenet_dali.pipeline(w.splits, True, 2, shard_id=rank, num_shards=2, seed=3)
            epochs = [[int(i) for _, y in imagenet_dali.one_pass(imagenet_dali.iterator(pipe, True))
                       for i in y] for _ in range(epoch_pass + 1)]
            shards.append(epochs[-1])
        a, b = shards
        assert len(a) == len(b) == n // 2 and len(set(a)) == len(a) and len(set(b)) == len(b)
        assert not set(a) & set(b) and set(a) | set(b) == set(range(n))
    # the workload gives each rank its shard too: rank r of 2 reads its half in batches of batch_size / 2
    firsts = [next(workload(root, "dali").train_batches(r, 2)) for r in range(2)]
    assert all(x.shape == (2, 3, 32, 32) for x, _ in firsts)


def test_the_result_records_the_decoder_that_ran(root):
    w = workload(root, "dali")
    assert w.data_pipeline() == {"decoder": "dali", "requested": "dali", "decode_device": "cpu",
                                 "dali_version": imagenet_dali.version()}
    assert workload(root, "auto").data_pipeline()["decoder"] == "pillow"  # auto on a CPU: the existing path
    # auto on CUDA picks DALI when it imports (choosing touches no device, so a CUDA-less machine can ask)
    assert workload(root, "auto", "cuda").decode_mode() == "dali"
    assert workload(root, "auto", "cuda").data_pipeline()["decode_device"] == "mixed"


def test_a_run_records_the_decoder_in_its_result(root, tmp_path):
    from suite.results.record import read_result

    res = CliRunner().invoke(app, ["run", "cv/imagenet_resnet50", "--variant", "tiny", "--no-isolate", "--quiet",
                                   "--set", f"data.path={root}", "--set", "data.decode=dali",
                                   "--results", str(tmp_path / "res")])
    assert res.exit_code == 0, res.output
    (path,) = list((tmp_path / "res").rglob("*.json"))
    result = read_result(path)
    assert result.status in ("reached", "budget") and result.steps > 0
    assert result.config["data_pipeline"]["decoder"] == "dali"
    assert result.software["nvidia-dali-cuda120"] == imagenet_dali.version()


def test_dali_asked_where_it_is_not_installed_is_refused_naming_the_field_and_the_extra(root, monkeypatch,
                                                                                         tmp_path):
    for mod in [m for m in sys.modules if m == "nvidia.dali" or m.startswith("nvidia.dali.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # `import nvidia.dali` now raises ImportError
    with pytest.raises(SpecError) as e:
        load_spec(SPEC, {"data.path": str(root), "data.decode": "dali"}, "tiny")
    text = " ".join(str(e.value).split())
    assert "data.decode" in text and "pip install 'trainbench-suite[dali]'" in text
    res = CliRunner().invoke(app, ["run", "cv/imagenet_resnet50", "--variant", "tiny", "--quiet",
                                   "--set", f"data.path={root}", "--set", "data.decode=dali",
                                   "--results", str(tmp_path / "res")])
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())
    assert "data.decode" in out and "trainbench-suite[dali]" in out, out
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").rglob("*.json"))
    # auto without DALI falls back to the existing path, on CUDA too (torchvision where installed, else Pillow)
    assert workload(root, "auto", "cuda").decode_mode() in ("torchvision", "pillow")
