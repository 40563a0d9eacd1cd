"""The Backend contract is explicit: every registered backend has every declared member, and no caller looks a
backend hook up by getattr/hasattr (which would let a hook exist outside the contract)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from suite import registry
from suite.backends import availability as availability
from suite.backends import base
from suite.registry import RegistryError

SUITE = Path(__file__).resolve().parents[2] / "suite"


@pytest.mark.parametrize("name", sorted(registry.BACKENDS))
def test_every_backend_implements_or_inherits_every_declared_member(name: str) -> None:
    cls = registry.backend_class(name)
    assert issubclass(cls, base.Backend)
    assert not inspect.isabstract(cls), f"{name}: abstract members left: {sorted(cls.__abstractmethods__)}"
    for member in base.CONTRACT:
        assert hasattr(cls, member), f"{name}: no {member}"
    assert cls.name == name
    assert cls.Options is None or hasattr(cls.Options, "model_validate")


def test_the_contract_lists_every_public_member_of_backend_and_the_docs_list_them_all() -> None:
    declared = {m for m in vars(base.Backend) if not m.startswith("_")} | set(base.Backend.__annotations__)
    assert declared == set(base.CONTRACT)
    doc = (SUITE.parent / "docs" / "writing-a-backend.md").read_text()
    missing = [m for m in base.CONTRACT if f"`{m}" not in doc]
    assert not missing, f"docs/writing-a-backend.md does not list {missing}"


def test_no_caller_looks_a_backend_hook_up_by_name() -> None:
    hooks = set(base.CONTRACT)
    # names that only a backend has; the generic ones (name, synchronize, close, ...) count when the object
    # looked up is visibly a backend (`backend`, `self.backend`, `backend_cls`, ...)
    backend_only = hooks - {"name", "available", "setup", "synchronize", "close"}
    found = []
    for path in sorted(SUITE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in hooks
                    and (node.args[1].value in backend_only or "backend" in ast.unparse(node.args[0]).lower())):
                found.append(f"{path.relative_to(SUITE.parent)}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    assert not found, "backend hooks looked up by name:\n" + "\n".join(found)


def test_a_class_that_is_not_a_backend_is_refused_with_what_to_do() -> None:
    with pytest.raises(RegistryError, match="does not subclass suite.backends.base.Backend"):
        registry.backend_class("collections:OrderedDict")


def test_defaults_of_the_optional_hooks() -> None:
    class Minimal(base.Backend):
        name = "minimal"

        def available(self): return availability.Availability(True)  # noqa: E704
        def setup(self, workload, opts): raise NotImplementedError  # noqa: E704
        def train_step(self, state, batch): raise NotImplementedError  # noqa: E704
        def eval_model(self, state): raise NotImplementedError  # noqa: E704
        def synchronize(self): pass  # noqa: E704
        def parallel_layout(self): return {"dp": 1}  # noqa: E704
        def close(self): pass  # noqa: E704

    b = Minimal(None)  # type: ignore[arg-type]
    assert (Minimal.Options, Minimal.supports(object()), b.data_shard(), b.target_may_count(), b.algorithm_report()) == \
        (None, None, None, True, {})
