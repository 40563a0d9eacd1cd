"""The CLI answers at once (issue 49, point 5): `--help`, `list` (and `list --json`, `list --matrix`), `spec schema`, `env` without
--peak, and the bad-input errors of `run`, `spec validate` and `ab` import no heavy stack, and cost under 0.5 s of CPU.

Two assertions, the first deterministic: each command runs in a fresh interpreter whose exit handler reports which of
HEAVY were imported (none may be, whatever the load). The second is CPU time (the child's user + system,
resource.getrusage(RUSAGE_CHILDREN)), not wall time: a loaded host stretches the wall, not the work; the best of five
is taken, since interference only adds.

The 0.5 s is a figure on the host that set it (AMD EPYC, Zen 5), and CPU time is not the same on every host: a slower
core, or a second pytest worker sharing caches and the core's turbo, costs more CPU for the same work (stop 53's CI
host measured `list --json` at 0.56 s where this one measures 0.30). So each try also times a fixed reference in a
fresh interpreter right before the command, importing what every command imports (pydantic, yaml, typer, rich), and
the limit is 0.5 s scaled by how much slower that reference ran than on the reference host (never below 0.5 s).
A real regression (torch imported: 1 to 3 s of CPU; a spec loop gone quadratic) is not a host's speed, and the
reference does not move with it: test_the_scaled_limit_still_fails_a_command_that_imports_torch is the control.

`env` counts on this host showing no accelerator (suite/devices.py `accelerator_evidence`): where one shows, `env`
imports torch by design (its CUDA properties), so the case is skipped there. `spec validate` of a whole spec and the
component-level errors of `run` are covered: what a check reads of each registered component lives in a module that
imports no torch (suite/registry.py TASK_CHECKS, MODEL_CONFIGS, DATASET_CONFIGS; tests/workloads/test_spec_parts.py).
Not covered (they still import torch, their checks live in modules that import it): a spec naming user code by import
path (an optimizer not described in suite/algorithms/optimizer_params.py, a schedule, loss or component
`pkg.mod:Name`: the module is imported; suite/algorithms/airbench.py, which cv/cifar10_resnet names, defines its
torch optimizer on first use so its schedule is read without torch), `run --parallel tp=2` with one process and
`run --precision fp64` (the plan's and the precision recipes' checks), `run --results` on a folder that cannot be
written, and `compare` (duckdb, numpy). `data list` imports numpy (suite/data/synthetic/files.py, the synthetic
writers' table): it is held to no torch only (DATA_CASES).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.backend_util import ROOT, env

CPU_LIMIT_S = 0.5
TRIES = 5
# a fresh interpreter importing what every command imports, and its CPU time (best of 5, an idle host) where
# CPU_LIMIT_S was set: AMD EPYC (family 26 model 2, Zen 5), Python 3.11.7
REFERENCE = "import pydantic, yaml, typer, rich.console"
REFERENCE_CPU_S = 0.11
# what a command that only reads its arguments, the specs and the installed packages never needs
HEAVY = ("torch", "numpy", "pandas", "pyarrow", "scipy", "sklearn", "transformers", "peft", "safetensors",
         "deepspeed", "megatron", "torchtitan", "verl", "ray", "duckdb", "gymnasium", "torch_geometric",
         "mlperf_logging")
# the probe reports, as the process ends (atexit runs on every exit road: suite.cli._exit), which of HEAVY it holds
PROBE = textwrap.dedent("""
    import atexit, json, sys
    atexit.register(lambda: sys.stderr.write("\\nheavy imported: %s\\n" % json.dumps(
        [m for m in {heavy!r} if m in sys.modules])))
    from suite.cli import main
    sys.argv = ["trainbench", *{args!r}]
    main()
""")

CASES = [
    (["--help"], 0, "Usage"),
    (["list"], 0, "cv/digits_cnn"),
    # the backends column: each backend's `supports` lives in a module that imports no framework (matrix.supports_path)
    (["list", "--json"], 0, '"backends": ['),
    (["list", "--tier", "smoke", "--json"], 0, '"name": "cv/digits_cnn"'),
    # the support matrix reads the specs' own fields (schema only) and each backend's torch-free `supports`
    (["list", "--matrix"], 0, "workload x backend"),
    (["list", "--matrix", "--why", "--json"], 0, '"limit": {'),
    (["spec", "schema"], 0, "WorkloadSpec"),
    (["env"], 0, "backends"),
    (["env", "--json"], 0, '"torchtitan"'),
    # bad input: every error is exit 2, named, before anything heavy is imported
    (["run"], 2, "name a workload"),
    (["run", "nope/x"], 2, "Did you mean"),
    (["run", "cv/digits_cn"], 2, "Did you mean"),
    (["run", "missing/file.yaml"], 2, "no such file"),
    (["run", "cv/digits_cnn", "--set", "budget.max_stepz=1"], 2, "budget.max_stepz"),
    (["run", "cv/digits_cnn", "--set", "nosuch=1"], 2, "unknown field"),
    (["run", "cv/digits_cnn", "--set", "data.batch_size=many"], 2, "data.batch_size"),
    (["run", "cv/digits_cnn", "--variant", "huge"], 2, "no variant 'huge'"),
    (["run", "cv/digits_cnn", "--backend", "tensorflow"], 2, "unknown backend 'tensorflow'"),
    (["run", "cv/digits_cnn", "--parallel", "tp=x"], 2, "--parallel 'tp=x'"),
    (["run", "cv/digits_cnn", "--parallel", "nosuch=2"], 2, "--parallel 'nosuch=2'"),
    (["run", "cv/digits_cnn", "--ac", "sometimes"], 2, "parallel.ac"),
    (["run", "--tier", "nightly"], 2, "--tier 'nightly'"),
    (["run", "cv/digits_cnn", "--seed", "-1"], 2, "--seed -1"),
    (["run", "cv/digits_cnn", "--threads", "0"], 2, "--threads"),
    (["spec", "validate", "missing/file.yaml"], 2, "no such file"),
    # a whole spec: schema, components (their torch-free parts) and plug-ins, one per domain
    (["spec", "validate", str(ROOT / "workloads" / "nlp" / "llama31_8b.yaml")], 0, "(nlp/llama31_8b, hash"),
    (["spec", "validate", str(ROOT / "workloads" / "cv" / "digits_cnn.yaml")], 0, "(cv/digits_cnn, hash"),
    (["spec", "validate", str(ROOT / "workloads" / "rec" / "dlrmv4.yaml")], 0, "(rec/dlrmv4, hash"),
    (["spec", "validate", str(ROOT / "workloads" / "rl" / "agentic_bugfix_grpo.yaml")], 0, "(rl/agentic_bugfix_grpo, hash"),
    (["spec", "validate", str(ROOT / "workloads" / "cv" / "cifar10_resnet.yaml")], 0, "(cv/cifar10_resnet, hash"),
    # what only the components' checks find: a model field that does not exist, or out of range
    (["run", "cv/digits_cnn", "--set", "model.nosuchfield=1"], 2, "model.nosuchfield"),
    (["run", "nlp/austen_gpt", "--set", "model.n_layer=-1"], 2, "model.n_layer"),
    (["run", "cv/digits_cnn", "--set", "data.nosuch=1"], 2, "data.nosuch"),
    (["ab", "--base", "HEAD", "--head", "HEAD", "-w", "cv/digits_cnn", "--order", "sideways"], 2,
     "--order 'sideways'"),
]


DATA_CASES = [
    (["data", "list"], 0, "fashion_mnist"),
    (["data", "list", "--json"], 0, '"name": "imagenet"'),
]


def _child_cpu(code: str, cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(COLUMNS="200"),
                          cwd=cwd, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done


def _run(args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    return _child_cpu(PROBE.format(args=args, heavy=HEAVY), cwd)


def _limit(cwd: Path) -> float:
    """CPU_LIMIT_S on this host as it runs now: scaled by the reference's CPU time here against the reference host's."""
    ref_s, done = _child_cpu(REFERENCE, cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return CPU_LIMIT_S * max(1.0, ref_s / REFERENCE_CPU_S)


def _best_try(args: list[str], code: int, says: str, cwd: Path) -> tuple[float, float]:
    """(CPU time, limit) of the try that came closest to passing; each try checks the exit code, the words and the
    imports."""
    best = (float("inf"), 0.0, 0.0)  # (share of the limit, CPU s, limit)
    for _ in range(TRIES):  # the best try: a test file running beside this one (make test's -n 2) inflates CPU time
        limit = _limit(cwd)
        cpu_s, done = _run(args, cwd)  # a fresh folder: `ab` would make its working folder here
        assert done.returncode == code, done.stderr[-2000:]
        assert says in done.stdout + done.stderr, (done.stdout[-1000:], done.stderr[-1000:])
        assert _heavy(done) == [], f"`trainbench {' '.join(args)}` imported {_heavy(done)}"
        best = min(best, (cpu_s / limit, cpu_s, limit))
        if best[0] < 1.0:
            break
    return best[1], best[2]


def _heavy(done: subprocess.CompletedProcess[str]) -> list[str]:
    line = next(x for x in done.stderr.splitlines() if x.startswith("heavy imported: "))
    return json.loads(line.removeprefix("heavy imported: "))


@pytest.mark.parametrize(("args", "code", "says"), CASES, ids=[" ".join(a) for a, _, _ in CASES])
def test_answers_without_heavy_imports_in_under_half_a_cpu_second(args: list[str], code: int, says: str,
                                                                  tmp_path: Path) -> None:
    if args[0] == "env":
        from suite import devices

        if devices.accelerator_evidence():
            pytest.skip(f"this host shows an accelerator ({devices.accelerator_evidence()}): env imports torch")
    cpu_s, limit = _best_try(args, code, says, tmp_path)
    assert cpu_s < limit, (f"`trainbench {' '.join(args)}` took {cpu_s:.2f} s of CPU (best of {TRIES}), over "
                           f"{limit:.2f} s ({CPU_LIMIT_S} s scaled by this host's reference)")
    if args[0] == "ab":
        assert not any(tmp_path.iterdir()), "a refused `ab` made its working folder"


@pytest.mark.parametrize(("args", "code", "says"), DATA_CASES, ids=[" ".join(a) for a, _, _ in DATA_CASES])
def test_data_list_imports_no_torch(args: list[str], code: int, says: str, tmp_path: Path) -> None:
    """The readers are imported for their locate(); each imports torch only where it makes a tensor."""
    _, done = _run(args, tmp_path)
    assert done.returncode == code and says in done.stdout, (done.stdout[-1000:], done.stderr[-1000:])
    assert set(_heavy(done)) <= {"numpy"}, f"`trainbench {' '.join(args)}` imported {_heavy(done)}"


def test_the_probe_sees_an_import_when_there_is_one(tmp_path: Path) -> None:
    """Negative control: a command that does import torch (a spec whose optimizer is user code, named by an import
    path: its class is imported to be checked) is reported."""
    text = (ROOT / "workloads" / "cv" / "digits_cnn.yaml").read_text()
    spec = tmp_path / "digits_rmsprop.yaml"
    spec.write_text(text.replace("name: cv/digits_cnn", "name: mine/digits_rmsprop").replace(
        "  name: adamw", "  name: torch.optim:RMSprop"))
    _, done = _run(["spec", "validate", str(spec)], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "torch" in _heavy(done)


def test_the_run_that_passes_the_preflight_still_gets_every_check() -> None:
    """A spec that is valid against the schema but names a component option that does not exist is refused (by the
    preflight now, which checks the spec whole; the plan checks it again)."""
    done = subprocess.run([sys.executable, "-m", "suite.cli", "run", "cv/digits_cnn", "--set", "model.nosuch=1"],
                          capture_output=True, text=True, env=env(), cwd=ROOT, timeout=300)
    assert done.returncode == 2 and "model.nosuch" in done.stderr, done.stderr[-2000:]


def test_the_scaled_limit_still_fails_a_command_that_imports_torch(tmp_path: Path) -> None:
    """Negative control for the scaling: the same measurement of a command that imports torch (the import itself,
    then --help) is over the limit the host's reference allows, however slow or loaded the host."""
    heavy = PROBE.replace("from suite.cli import main", "import torch\nfrom suite.cli import main")
    best = float("inf")
    for _ in range(3):
        limit = _limit(tmp_path)
        cpu_s, done = _child_cpu(heavy.format(args=["--help"], heavy=HEAVY), tmp_path)
        assert done.returncode == 0 and "torch" in _heavy(done), done.stderr[-2000:]
        best = min(best, cpu_s / limit)
    assert best > 1.0, f"importing torch cost {best:.2f} of the scaled limit"
