"""An engine is one folder plus one registry line (issue 43): a new engine written as a package of its own
(`backend.py` with its class, `options.py` with what is known of it without importing it) and named by one line of
`registry.BACKENDS` is seen by every place that speaks of engines (the support matrix and its reasons' kind, `trainbench
env`'s import-free availability, the fsdp translation) and trains a workload through the harness, with no other file
touched. The control: the same engine without its `options.py` still runs, and each place falls back to its default
(asks the class; "not wired"; no fsdp translation) rather than to another engine's answer."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from suite import harness, registry
from suite.backends import limits, matrix, translate
from suite.backends.availability import Availability
from suite.specload import load_spec

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "workloads" / "cv" / "digits_cnn.yaml"
AUSTEN = ROOT / "workloads" / "nlp" / "austen_gpt.yaml"

BACKEND = textwrap.dedent('''
    from typing import ClassVar

    from suite.backends.torch.backend import TorchBackend

    from {pkg} import options as _options


    class DemoBackend(TorchBackend):
        """The torch loop under another name: what the engine does is not the point, where it lives is."""

        name: ClassVar[str] = "demo"
        Options = _options.Options
        supports = staticmethod(_options.supports)
''')

OPTIONS = textwrap.dedent('''
    from typing import Any

    from suite.backends.availability import Availability
    from suite.backends.limits import Limit
    from suite.backends.torch.options import Options  # noqa: F401 - the block it reads is the torch backend's


    def supports(spec: Any) -> str | None:
        return None if spec.domain == "cv" else f"the demo engine trains images only, not domain {spec.domain!r}"


    def limit(spec: Any) -> Limit:
        return Limit("engine limit", "the demo engine ships image models only")


    def available_installed(device_type: str) -> Availability:
        return Availability(True, "demo: always here", "0.0.1")


    def fsdp_mechanism(device_type: str) -> tuple[str, bool, bool, bool]:
        return ("demo sharding", True, False, True)
''')


def _engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pkg: str, with_options: bool) -> None:
    folder = tmp_path / pkg
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    if with_options:
        (folder / "options.py").write_text(OPTIONS)
        (folder / "backend.py").write_text(BACKEND.format(pkg=pkg))
    else:
        (folder / "backend.py").write_text(BACKEND.format(pkg=pkg).replace(
            f"from {pkg} import options as _options\n", "").replace(
            "Options = _options.Options\n        supports = staticmethod(_options.supports)\n", ""))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.BACKENDS, "demo", f"{pkg}.backend:DemoBackend")  # the one registry line


@pytest.fixture(autouse=True)
def _forget():
    yield
    for name in [m for m in sys.modules if m.startswith("tbdemo_")]:
        del sys.modules[name]


def test_a_new_engine_is_its_folder_and_one_registry_line(tmp_path, monkeypatch):
    from suite.cli.env import _without_import

    _engine(tmp_path, monkeypatch, "tbdemo_full", with_options=True)
    digits, austen = load_spec(DIGITS, variant="tiny"), load_spec(AUSTEN)
    grid = matrix.matrix({"cv/digits_cnn": digits, "nlp/austen_gpt": austen}, ["demo"])
    assert grid == {"cv/digits_cnn": {"demo": None},
                    "nlp/austen_gpt": {"demo": "the demo engine trains images only, not domain 'nlp'"}}
    assert limits.classify("demo", austen) == limits.Limit("engine limit", "the demo engine ships image models only")
    assert _without_import()["demo"]("cpu") == Availability(True, "demo: always here", "0.0.1")
    assert translate.fsdp_mapping("demo", 4).describe() == (
        "fsdp=4 -> demo sharding over 4 ranks (parameters, optimizer state sharded; gradients whole on every rank)")
    result, _ = harness.run(harness.RunRequest(spec=digits, backend="demo", results_dir=tmp_path / "results",
                                               threads=1, measure_peak=False))
    assert result.backend == "demo" and result.steps > 0 and result.status in ("reached", "budget"), result.status


def test_without_its_options_module_each_place_falls_back_to_its_default(tmp_path, monkeypatch):
    from suite.cli.env import _without_import

    _engine(tmp_path, monkeypatch, "tbdemo_bare", with_options=False)
    austen = load_spec(AUSTEN)
    assert matrix.supports_path("demo") is None and registry.engine_attr("demo", "limit") is None
    assert limits.classify("demo", austen).kind == "not wired"
    assert "demo" not in _without_import()  # `env` asks the class instead
    with pytest.raises(KeyError, match="no fsdp mapping for backend 'demo'"):
        translate.fsdp_mapping("demo", 2)
