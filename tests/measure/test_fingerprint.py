"""The fingerprint: accelerator software keys always present, per-device clocks/power/ECC/MIG and the interconnect
from NVML (faked here: no GPU on CI), host load at start and end, container image, NCCL_*/HCCL_* environment;
compare and the run page warn when a run's host was loaded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from suite.measure import energy, environment, fingerprint
from suite.results.stats import RunFigures, figures_of


class FakeNVML:
    """The NVML calls the fingerprint makes, answering like an 8-GPU H200 box with NVLink on GPUs 0 and 1."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_NVLINK_MAX_LINKS = 1, 2, 18

    def nvmlSystemGetDriverVersion(self):
        return b"570.86.15"

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        raise RuntimeError("no UUIDs in this fake")

    def nvmlDeviceGetHandleByPciBusId_v2(self, pci):
        raise RuntimeError("no PCI ids in this fake")

    def nvmlDeviceGetClockInfo(self, h, kind):
        return {1: 1755, 2: 3201}[kind]

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return {1: 1980, 2: 3201}[kind]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000  # mW

    def nvmlDeviceGetEccMode(self, h):
        return (1, 1)

    def nvmlDeviceGetMigMode(self, h):
        if h == 1:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return (0, 0)

    def nvmlDeviceGetNvLinkState(self, h, link):
        if h > 1 or link >= 18:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 1


@pytest.fixture
def fake_cuda(monkeypatch):
    props = SimpleNamespace(name="NVIDIA H200", total_memory=141 * 2**30, major=9, minor=0, multi_processor_count=132)
    monkeypatch.setattr(energy, "_nvml", lambda: FakeNVML())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91002)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 3))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_software_keys_are_always_present_null_when_absent():
    sw = environment.software()
    for key in fingerprint.ACCEL_SOFTWARE_KEYS:
        assert key in sw
    assert sw["cudnn"] is None and sw["nccl"] is None and sw["driver"] is None  # this CPU machine has none
    assert sw["torch_npu"] is None  # never installed on CPU machines (FACTS.md)


def test_software_on_a_faked_cuda_machine(fake_cuda):
    sw = environment.software()
    assert (sw["driver"], sw["cuda_runtime"], sw["cudnn"], sw["nccl"]) == ("570.86.15", "12.8", "91002", "2.27.3")


def test_per_device_clocks_power_ecc_mig_and_interconnect(fake_cuda, monkeypatch):
    monkeypatch.setenv("NCCL_IB_DISABLE", "1")
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "600")
    monkeypatch.setenv("TRAINBENCH_CONTAINER_IMAGE", "ghcr.io/example/trainbench@sha256:abc")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    device = SimpleNamespace(type="cuda", name=lambda: "NVIDIA H200")
    hw = environment.hardware(device, 2, load_start=[0.5, 0.4, 0.3], world=4)
    assert hw.node_count == 2  # 4 ranks, 2 per node
    d0, d1 = hw.devices
    assert d0["sm_clock_mhz"] == 1755 and d0["sm_clock_max_mhz"] == 1980 and d0["memory_clock_mhz"] == 3201
    assert d0["power_limit_w"] == 700.0 and d0["ecc"] is True and d0["mig"] is False
    assert d1["mig"] is None  # a probe that fails is null, never a failed run
    assert d0["compute_capability"] == "9.0" and d0["sm_count"] == 132
    assert hw.interconnect == "NVLink: gpu0 18 links, gpu1 18 links"
    assert hw.comm_env == {"HCCL_CONNECT_TIMEOUT": "600", "NCCL_IB_DISABLE": "1"}
    assert hw.container_image == "ghcr.io/example/trainbench@sha256:abc"
    assert hw.load_avg_start == [0.5, 0.4, 0.3] and hw.load_avg_end is not None and len(hw.load_avg_end) == 3


def test_load_warning_reaches_compare_figures(tmp_path):
    from benchmarks.sim.results import simulated_result, write_all
    from suite.compare.output import to_json, to_markdown
    from suite.compare.tta import compare, host_load_warnings

    def with_load(seed: int, load: list[float] | None):
        r = simulated_result(seed=seed, steps_to_target=100, time_per_step_s=0.01)
        return r.model_copy(update={"hardware": r.hardware.model_copy(update={"load_avg_end": load})})

    cores = with_load(0, None).hardware.cpu_cores
    quiet, busy = with_load(0, [0.2, 0.1, 0.1]), with_load(1, [3.0 * cores, 1.0, 1.0])
    assert figures_of(quiet).host_load is None
    text = figures_of(busy).host_load
    assert text and f"on {cores} cores" in text
    warn = host_load_warnings([figures_of(quiet)], [figures_of(busy), figures_of(quiet)])
    assert warn == [f"candidate: 1 of 2 run(s) on a busy host ({text})"]
    assert RunFigures.model_validate({"run_id": "a", "seed": 0, "status": "budget"}).host_load is None  # old files

    # end to end through compare's lean file reader: the report carries the warning
    base = write_all(tmp_path / "base", [with_load(s, [0.1, 0.1, 0.1]) for s in range(3)])
    cand = write_all(tmp_path / "cand", [with_load(s, [0.1, 0.1, 0.1]) for s in range(2)] + [with_load(2, [9.0 * cores, 1, 1])])
    report = compare([base], [cand])
    (pair,) = report.pairs
    assert len(pair.warnings) == 1 and pair.warnings[0].startswith("candidate: 1 of 3 run(s) on a busy host")
    assert to_json(report)["pairs"][0]["warnings"] == pair.warnings
    assert "**warning:** candidate: 1 of 3" in to_markdown(report)


def test_a_real_result_carries_every_fingerprint_key(tmp_path):
    from suite import registry
    from suite.harness import RunRequest, run
    from suite.specload import load_spec

    spec = load_spec(registry.find_workload("cv/digits_cnn"), variant="tiny")
    result, _ = run(RunRequest(spec=spec, threads=1, results_dir=None, measure_peak=False))
    assert set(fingerprint.ACCEL_SOFTWARE_KEYS) <= set(result.software)
    hw = result.hardware.model_dump()
    for key in ("node_count", "devices", "interconnect", "load_avg_start", "load_avg_end", "container_image",
                "comm_env"):
        assert key in hw
    assert result.hardware.load_avg_start is not None and result.hardware.load_avg_end is not None


def test_the_run_page_warns_about_a_busy_host(tmp_path):
    from benchmarks.sim.results import site_result
    from suite.results.record import write_result
    from suite.site.build import build_site

    r = site_result(seed=0)
    busy = r.model_copy(update={"hardware": r.hardware.model_copy(update={"cpu_cores": 2, "load_avg_start": [7.5, 3, 1]}),
                                "run_id": "busy0001"})
    quiet = site_result(seed=1).model_copy(update={"run_id": "quiet001"})
    results = tmp_path / "results"
    paths = {x.run_id: write_result(results, x) for x in (busy, quiet)}
    build_site(results, tmp_path / "out")
    pages = {}
    for page in (tmp_path / "out" / "r").glob("*.html"):
        text = page.read_text()
        pages.update({rid: text for rid in paths if f"run {rid}" in text})
    assert 'id="host-load"' in pages["busy0001"] and "host load 7.5 on 2 cores" in pages["busy0001"]
    assert 'id="host-load"' not in pages["quiet001"]


# ---- Ascend: what torch_npu exposes, faked (torch_npu is never installed on a CPU machine, FACTS.md) ----------


@pytest.fixture
def fake_ascend(monkeypatch):
    """A process with torch_npu loaded on a 910B3 box: torch.npu's device calls, torch_npu.utils.get_cann_version."""
    import sys
    from types import ModuleType

    props = SimpleNamespace(name="Ascend910B3", total_memory=64 * 2**30, cube_core_num=20, vector_core_num=40,
                            L2_cache_size=192 * 2**20)
    npu = SimpleNamespace(get_device_properties=lambda i: props, get_device_name=lambda i: "Ascend910B3",
                          get_soc_version=lambda: 223, device_count=lambda: 8)
    versions = {"CANN": "8.3.RC1", "DRIVER": "25.2.0", "HCCL": "8.3.RC1"}
    torch_npu = ModuleType("torch_npu")
    torch_npu.__version__ = "2.13.0"
    torch_npu.utils = SimpleNamespace(get_cann_version=lambda module="CANN": versions.get(module, ""))
    monkeypatch.setitem(sys.modules, "torch_npu", torch_npu)
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    return torch_npu


def test_npu_software_records_cann_driver_and_torch_npu(fake_ascend, monkeypatch):
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    sw = environment.software()
    assert (sw["cann"], sw["driver"], sw["torch_npu"]) == ("8.3.RC1", "25.2.0", "2.13.0")
    assert sw["cudnn"] is None and sw["nccl"] is None  # the CUDA keys stay present, null


def test_npu_versions_fall_back_when_torch_npu_cannot_say(fake_ascend, monkeypatch, tmp_path):
    """An older CANN (< 8.1.RC1) makes get_cann_version answer "": the toolkit's version file is read instead."""
    fake_ascend.utils = SimpleNamespace(get_cann_version=lambda module="CANN": "")
    (tmp_path / "version.cfg").write_text("runtime_running_version=[8.0.0:8.0.RC3]\ntoolkit_version=8.0.RC3\n")
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(tmp_path))
    sw = environment.software()
    assert sw["cann"] == "[8.0.0:8.0.RC3]" and sw["driver"] is None and sw["torch_npu"] == "2.13.0"


def test_npu_devices_record_the_soc_cores_and_memory(fake_ascend):
    device = SimpleNamespace(type="npu", name=lambda: "Ascend910B3")
    hw = environment.hardware(device, 2)
    assert [d["index"] for d in hw.devices] == [0, 1]
    assert hw.devices[0] == {"index": 0, "name": "Ascend910B3", "soc_version": 223, "memory_bytes": 64 * 2**30,
                             "cube_cores": 20, "vector_cores": 40, "l2_cache_bytes": 192 * 2**20}


def test_npu_probes_that_fail_are_null(fake_ascend, monkeypatch):
    def broken(*_a, **_k):
        raise RuntimeError("npu not initialised")

    monkeypatch.setattr(torch, "npu", SimpleNamespace(get_device_properties=broken, get_device_name=broken,
                                                      get_soc_version=broken), raising=False)
    fake_ascend.utils = SimpleNamespace(get_cann_version=broken)
    [d] = fingerprint.npu_devices(1)
    assert d["name"] is None and d["soc_version"] is None and d["cube_cores"] is None
    assert fingerprint.npu_component_version(fake_ascend, "CANN") is None
