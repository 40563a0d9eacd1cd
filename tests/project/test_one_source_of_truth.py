"""One source of truth (issue 49, point 3): what `list`, `run --help`, the README and docs/workloads.md say about
workloads, tiers and backends is the registry's (its spec files and its support matrix), so a merge that duplicates
a row or a change that leaves a table behind fails here. Each contradiction the issue found has its test."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter

from support.backend_util import ROOT, env

from suite import registry
from suite.backends.matrix import load_all, matrix
from suite.specload import load_spec_schema

README = ROOT / "README.md"
WORKLOADS_MD = ROOT / "docs" / "workloads.md"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True,
                          env=env(COLUMNS="250"), cwd=ROOT, timeout=300)


def _tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table: its rows (header first, separator dropped) as lists of stripped cells."""
    tables, cur = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                cur.append(cells)
        elif cur:
            tables.append(cur)
            cur = []
    return tables


def _tiers() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, path in registry.workload_files().items():
        for tier in load_spec_schema(path).tiers:
            out.setdefault(tier, set()).add(name)
    return out


def test_list_json_backends_are_the_support_matrix() -> None:
    """`list` once took its backends from the spec's `backends:` option blocks: llama31_8b showed deepspeed and
    megatron (which refuse its layout) and not torchtitan (which runs it)."""
    rows = {r["name"]: r for r in json.loads(_cli("list", "--json").stdout)}
    specs, problems = load_all(registry.workload_files())
    assert not problems
    grid = matrix(specs)
    for name, row in rows.items():
        assert row["backends"] == [b for b, reason in grid[name].items() if reason is None], name
    # issue 45: its fsdp=8 is ZeRO-3 under DeepSpeed and the distributed optimizer under Megatron
    assert {"torch", "deepspeed", "megatron", "torchtitan"} <= set(rows["nlp/llama31_8b"]["backends"])
    table = _cli("list").stdout
    assert "deepspeed,megatron" not in table and "list --matrix" in table  # the plain table claims no backends


def test_run_help_offers_every_registered_backend() -> None:
    shown = " ".join(_cli("run", "--help").stdout.split())
    choices = re.search(r"--backend\s+<str>\s+(.*?)\[default", shown)
    assert choices, shown[:2000]
    names = [n.strip("│ ") for n in choices.group(1).replace("│", " ").split("|")]
    assert [n.split()[0] for n in names if n.split()] == list(registry.BACKENDS)


def test_list_matrix_is_a_table_and_a_summary_with_the_reasons_on_why() -> None:
    plain = _cli("list", "--matrix")
    assert plain.returncode == 0, plain.stderr
    lines = plain.stdout.splitlines()
    assert len(lines) < len(registry.workload_files()) + 20, f"{len(lines)} lines"
    assert "supported per backend" in plain.stdout and "`--why`" in plain.stdout
    assert "nlp/deepseekv3_671b x deepspeed:" not in plain.stdout
    why = _cli("list", "--matrix", "--why")
    assert "nlp/deepseekv3_671b x deepspeed: parallel.tp/pp" in why.stdout


def test_readme_tier_table_is_the_registry_s_tiers_once_each() -> None:
    text = README.read_text()
    section = text[text.index("## Tiers"):]
    section = section[: section.index("\n## ", 4)]
    (table,) = _tables(section)
    tiers = [row[0].strip("`") for row in table[1:]]
    assert sorted(tiers) == sorted(set(tiers)), f"a tier has two rows: {Counter(tiers)}"
    expected = _tiers()
    assert set(tiers) == set(expected)
    for row in table[1:]:
        named = set(re.findall(r"`([a-z]+/[a-z0-9_]+)`", row[2]))
        tier = row[0].strip("`")
        assert named == expected[tier], (f"README's {tier} row: missing {sorted(expected[tier] - named)}, "
                                         f"not in the tier {sorted(named - expected[tier])}")


def test_readme_names_every_backend() -> None:
    usage = README.read_text().split("## Using it", 1)[1].split("\n## ", 1)[0]
    assert all(re.search(rf"\b{b}\b", usage) for b in registry.BACKENDS), [b for b in registry.BACKENDS
                                                                          if not re.search(rf"\b{b}\b", usage)]
    assert "megatron (GPT workloads)" not in usage  # Megatron runs the Llamas, GRPO and LoRA too (the matrix)


def test_docs_workloads_tables_have_no_duplicated_row_and_the_catalog_is_the_registry() -> None:
    tables = _tables(WORKLOADS_MD.read_text())
    for table in tables:
        keys = Counter(row[0] for row in table[1:])
        dup = {k: n for k, n in keys.items() if n > 1}
        assert not dup, f"docs/workloads.md table {table[0][:3]}: rows twice: {dup}"
    (catalog,) = [t for t in tables if t[0][:2] == ["workload", "tier"]]
    rows = {row[0].strip("`"): row[1] for row in catalog[1:]}
    expected = {name: tier for tier, names in _tiers().items() for name in names}
    assert set(rows) == set(expected), (sorted(set(expected) - set(rows)), sorted(set(rows) - set(expected)))
    assert {n: t for n, t in rows.items() if t != expected[n]} == {}


def test_docs_do_not_say_a_supported_layout_is_refused() -> None:
    """docs/workloads.md said the torch checkpointing plan was the GPT's only, while `--parallel fsdp=2 --ac full`
    runs a Llama (the matrix says torch runs llama31_8b's `{fsdp: 8, ac: full}`)."""
    specs, _ = load_all({"nlp/llama31_8b": registry.workload_files()["nlp/llama31_8b"]})
    assert matrix(specs)["nlp/llama31_8b"]["torch"] is None
    assert "covers the suite GPT only" not in WORKLOADS_MD.read_text()


def test_readme_s_first_paragraph_names_every_backend() -> None:
    """Issue 43: README's opening sentence listed four engines while six were registered."""
    intro = README.read_text().split("\n\n", 2)[1].lower()
    spoken = {"torch": "pytorch"}
    missing = [b for b in registry.BACKENDS if spoken.get(b, b) not in intro]
    assert not missing, f"README's first paragraph does not name {missing}"
