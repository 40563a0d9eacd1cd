"""Issue 43: a Llama-class model family is named in its own folder and in the registry only. Every identifier a
registered family is known by (its registry name, its Hugging Face architecture names, its model_type), taken from
the registry itself (suite/models/families.py), may appear as a whole string literal (a branch condition such as
`arch == "qwen2"`, a `"Qwen2ForCausalLM"` key, an `in` test) only under suite/models/<family>/ of that family and in
the registry; everywhere else in suite/ the Hugging Face loader, the engine adapters and the memory estimator must
read traits from the config. Docstrings are prose, not conditions, and are not read.

One identifier is exempt, and the test pins which: a family name that is also a `model.arch` a spec names
(suite/registry.py MODELS: `llama`, the decoder's component, compared as `spec.model.arch == "llama"`), which names
the spec's model kind, not the family. One literal outside is pinned by file (`WRITES_FORMAT`): the synthetic writer of
MLPerf's fused-qkv Llama 2 checkpoint puts `LlamaForCausalLM` into the config.json it writes (file content in the
real format; suite.data may not import the models' registry). Non-vacuous: the scanner finds each reading family's architecture names in its
own folder, and flags a branch on a family's name written the way hf/checkpoint.py had it before the registry."""

from __future__ import annotations

import ast
from pathlib import Path

from support.tests_paths import ROOT

from suite import registry
from suite.models import families

SUITE = ROOT / "suite"


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def mentions(source: str, names: dict[str, str]) -> list[tuple[int, str]]:
    """(line, identifier) of every string literal (docstrings aside) equal, ignoring case, to one of `names`
    (lower-cased identifier -> the family it names)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            and node.value.strip().lower() in names]


def identifiers() -> dict[str, str]:
    out = {}
    for f in families.all_families():
        for ident in (f.name, f.model_type, *f.architectures):
            if ident:
                out[ident.lower()] = f.name
    return out


EXEMPT = {ident for ident in identifiers() if ident in registry.MODELS}
WRITES_FORMAT = {("suite/data/synthetic/files.py", "LlamaForCausalLM")}  # a config.json it writes, not a condition


def _folder(family: str) -> Path:
    return ROOT / Path(*families.FAMILIES[family].split("."))


def test_the_only_exempt_identifier_is_the_llama_component():
    assert EXEMPT == {"llama"}


def test_no_module_outside_a_familys_folder_and_the_registry_names_a_family():
    names = {k: v for k, v in identifiers().items() if k not in EXEMPT}
    assert len(families.all_families()) >= 7 and len(names) >= 10  # seven families, four architectures
    own = {f.name: _folder(f.name) for f in families.all_families()}
    found: dict[str, int] = {}
    stray = []
    for path in sorted(SUITE.rglob("*.py")):
        for line, ident in mentions(path.read_text(encoding="utf-8"), names):
            family = names[ident.strip().lower()]
            if path == SUITE / "models" / "families.py" or own[family] in path.parents:
                found[family] = found.get(family, 0) + 1
            elif (str(path.relative_to(ROOT)), ident) in WRITES_FORMAT:
                found["format"] = found.get("format", 0) + 1
            else:
                stray.append(f"{path.relative_to(ROOT)}:{line}: {ident!r} names family {family}")
    assert not stray, "a family named outside its folder and the registry:\n" + "\n".join(stray)
    reading = {f.name for f in families.all_families() if f.architectures}
    assert reading >= {"llama", "qwen2", "qwen3", "mixtral"}
    assert all(found.get(name, 0) >= 1 for name in reading - EXEMPT), found  # the scanner sees real declarations
    assert found.get("format") == len(WRITES_FORMAT)  # and the pinned literal is still there (else drop it)


def test_the_scanner_flags_a_branch_on_a_family_name():
    names = {k: v for k, v in identifiers().items() if k not in EXEMPT}
    source = '''
ARCHITECTURES = {"LlamaForCausalLM": 1, "MixtralForCausalLM": 2, "Qwen2ForCausalLM": 3}


def fields(arch):
    """Docstrings may say qwen2."""
    return {"qkv_bias": arch == "qwen2", "qk_norm": arch in ("Qwen3",)}
'''
    hits = mentions(source, names)
    assert sorted(v for _, v in hits) == ["LlamaForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM", "Qwen3",
                                               "qwen2"]
