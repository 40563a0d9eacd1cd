"""docs/workloads.md's per-workload tables against the registry (issue 43, point 4): a merge once left the
`austen_moe` row twice with different evidence, and a fidelity table can drift from the spec it describes.

What is checked, against the spec files the registry loads (`load_spec_schema`, the same values a run reads):
- every `### <workload>` section is a registered workload, at most once;
- the catalog's target column: the threshold and its direction are the spec's `target.value` and `mode`;
- the full-tier memory table: each workload's precision and micro-batch / global batch are the spec's;
- every `key: value` claim in a fidelity table's "ours" column (`data.batch_size: 1024`, `lr: 0.0008`,
  `parallel: {fsdp: 8, ac: full}`, `preset: llama3.1-8b`, ...): the key resolves to one place in the spec (a
  dotted path, or a last name that is unique outside `variants` and throughput mode; a model preset's fields
  through suite/models/llama/presets.py) and its value is the spec's (numbers to 1e-12, a mapping by its given keys,
  `label_smoothing 0.2` against a component's name and parameter).

What is not checked, honestly: the reference column (the other project's code, cited by line), prose, the measured
times and memory figures (measurements, not spec values), parameter counts in prose (`11.9 B parameters`: that
would build the model), which backend a sentence says runs a spec (prose cannot tell a whole spec from an
option of it; `list --matrix` is the registry's answer), and the claims listed in UNCHECKED with their reason.
Duplicated rows within any table fail tests/project/test_one_source_of_truth.py.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from typing import Any

import yaml
from support.backend_util import ROOT

from suite import registry
from suite.specload import load_spec_schema

WORKLOADS_MD = ROOT / "docs" / "workloads.md"
NOT_WORKLOADS = {"The LLM workloads (issue 30)"}  # a `###` heading of the measured-times section, not a recipe
# claims whose key the spec does not hold (a reader's default, a preset of another family): (workload, claim) -> why
UNCHECKED = {
    ("cv/imagenet_resnet50", "data.decode: auto"): "a reader option with a default the spec does not write",
    ("cv/flux1", "caption_dropout: 0.1"): "the flux latents reader's default, not a spec field",
}
MIN_CHECKED = 200  # 209 claims checked today: fewer means the parser stopped seeing them, not that the doc got shorter


@cache
def spec(name: str) -> dict[str, Any]:
    data = load_spec_schema(registry.workload_files()[name]).model_dump(mode="json")
    model = data.get("model") or {}
    if model.get("preset"):
        from suite.models.llama import presets

        if model["preset"] in presets.PRESETS:
            data["model"] = presets.expand(model)
    return data


def sections(text: str) -> list[tuple[str, str]]:
    return [(part.split("\n", 1)[0].strip(), part) for part in re.split(r"^### ", text, flags=re.M)[1:]]


def rows(section: str) -> list[list[str]]:
    out = []
    for line in section.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                out.append(cells)
    return out


def _walk(d: Any, path: tuple[str, ...] = ()) -> Any:
    if isinstance(d, dict):
        for k, v in d.items():
            yield (*path, str(k)), v
            yield from _walk(v, (*path, str(k)))


def _number(text: str) -> float | None:
    m = re.fullmatch(r"([-+]?[\d.]+(?:e[-+]?\d+)?)(?:/([\d.]+(?:e[-+]?\d+)?))?", text.strip())
    if not m:
        return None
    return float(m.group(1)) / (float(m.group(2)) if m.group(2) else 1.0)


def _same(doc: Any, ours: Any) -> bool:
    if isinstance(doc, str) and _number(doc) is not None:
        doc = _number(doc)  # YAML reads 5e-4 as a string; 1/9 is the doc's way to write a ratio
    if isinstance(doc, bool) or isinstance(ours, bool):
        return doc == ours
    if isinstance(doc, int | float) and isinstance(ours, int | float):
        return math.isclose(doc, ours, rel_tol=1e-12, abs_tol=1e-15)
    if isinstance(doc, dict) and isinstance(ours, dict):
        return all(k in ours and _same(v, ours[k]) for k, v in doc.items())
    if isinstance(doc, list) and isinstance(ours, list):
        return len(doc) == len(ours) and all(_same(a, b) for a, b in zip(doc, ours, strict=True))
    if isinstance(doc, str) and isinstance(ours, dict) and "name" in ours:  # `loss: label_smoothing 0.2`
        word, *rest = doc.split()
        numbers = [v for v in ours.values() if isinstance(v, int | float) and not isinstance(v, bool)]
        return word == ours["name"] and all(any(_same(r, n) for n in numbers) for r in rest)
    return doc == ours


def resolve(data: dict[str, Any], key: str) -> list[tuple[str, Any]]:
    """The places in the spec a claim's key can mean: a dotted path's or a last name's matches, outside `variants`
    (a variant's override) and `throughput` (throughput mode's own warm-up); where several remain, those that
    hold a value."""
    parts = tuple(key.split("."))
    hits = [(".".join(p), v) for p, v in _walk(data) if p[-len(parts):] == parts
            and p[0] not in ("variants", "throughput")]
    if len({json.dumps(v, sort_keys=True) for _, v in hits}) > 1:
        hits = [(p, v) for p, v in hits if v is not None]
    return hits


def claims() -> list[tuple[str, str, str]]:
    """(workload, row item, `key: value`) of every fidelity table's "ours" column."""
    out = []
    files = registry.workload_files()
    for head, body in sections(WORKLOADS_MD.read_text()):
        name = head.split()[0]
        if name not in files:
            continue
        table = rows(body)
        if not table or not table[0][2].startswith("ours"):
            continue
        for row in table[1:]:
            out += [(name, row[0], tok) for tok in re.findall(r"`([^`]+)`", row[2])
                    if re.fullmatch(r"[a-z_][a-z0-9_.]*: .+", tok)]
    return out


def test_each_recipe_section_is_a_registered_workload_once() -> None:
    heads = [h for h, _ in sections(WORKLOADS_MD.read_text()) if h not in NOT_WORKLOADS]
    names = [h.split()[0] for h in heads]
    files = registry.workload_files()
    assert [h for h, n in zip(heads, names, strict=True) if n not in files] == [], "sections of no registered workload"
    assert sorted(n for n in set(names) if names.count(n) > 1) == [], "a workload has two sections"


def test_the_catalog_targets_are_the_specs() -> None:
    (catalog,) = [t for t in [rows(s) for s in WORKLOADS_MD.read_text().split("\n## ")] if t and t[0][:2] == ["workload", "tier"]]
    wrong = []
    for row in catalog[1:]:
        name, target = row[0].strip("`"), row[2]
        m = re.search(r"(>=|<=)\s*([\d.]+)", target)
        t = spec(name)["target"]
        if not m or (m.group(1) == ">=") != (t["mode"] == "max") or not _same(m.group(2), t["value"]):
            wrong.append(f"{name}: the doc says {target!r}, the spec {t['metric']} {t['mode']} {t['value']}")
    assert not wrong, "\n".join(wrong)


def test_the_full_tier_memory_table_is_the_specs_precision_and_batches() -> None:
    text = WORKLOADS_MD.read_text()
    section = text[text.index("## Full tier: precision, compile"):text.index("## Full tier: each workload")]
    (table,) = [rows(section)]
    assert table[0][:3] == ["workload", "precision", "micro-batch"]
    wrong = []
    for row in table[1:]:
        s = spec(row[0])
        micro = s["data"].get("micro_batch_size") or s["data"]["batch_size"]
        m = re.fullmatch(r"(\d+) \((?:x (\d+) = (\d+)|no accumulation)\)", row[2])
        if row[1] != s["precision"]:
            wrong.append(f"{row[0]}: precision {row[1]} in the doc, {s['precision']} in the spec")
        if not m or int(m.group(1)) != micro or (m.group(3) and (int(m.group(1)) * int(m.group(2)) != int(m.group(3))
                                                                   or int(m.group(3)) != s["data"]["batch_size"])) \
                or (not m.group(3) and micro != s["data"]["batch_size"]):
            wrong.append(f"{row[0]}: micro-batch {row[2]!r} in the doc, {micro} of {s['data']['batch_size']} in the spec")
    assert not wrong, "\n".join(wrong)


def test_every_key_value_claim_of_the_fidelity_tables_is_the_spec_s() -> None:
    found = claims()
    checked, wrong, unresolved = 0, [], []
    for name, item, tok in found:
        key, _, value = tok.partition(": ")
        if (name, tok) in UNCHECKED:
            continue
        try:
            doc = yaml.safe_load(value)
        except yaml.YAMLError:
            doc = value
        hits = resolve(spec(name), key)
        if len({json.dumps(v, sort_keys=True) for _, v in hits}) != 1:
            unresolved.append(f"{name} [{item}] `{tok}`: " + (", ".join(p for p, _ in hits) or "no such key"))
            continue
        checked += 1
        if not _same(doc, hits[0][1]):
            wrong.append(f"{name} [{item}] `{tok}`: the spec has {hits[0][0]} = {hits[0][1]!r}")
    assert not wrong, "docs/workloads.md contradicts the spec:\n" + "\n".join(wrong)
    assert not unresolved, ("claims that resolve to no single spec field (name the dotted path, or add the claim to "
                            "UNCHECKED with the reason):\n" + "\n".join(unresolved))
    assert checked >= MIN_CHECKED, f"only {checked} claims checked"


def test_the_checks_catch_a_contradiction_and_a_second_section() -> None:
    """Negative controls on edited copies: a changed number, a doubled section."""
    name, item, tok = next(c for c in claims() if c[2].startswith("data.batch_size"))
    key, _, value = tok.partition(": ")
    assert _same(yaml.safe_load(value), resolve(spec(name), key)[0][1])
    assert not _same(int(value) + 1, resolve(spec(name), key)[0][1])
    assert not _same("label_smoothing 0.3", {"name": "label_smoothing", "smoothing": 0.2})
    assert not _same({"fsdp": 4}, {"fsdp": 8, "ac": "full"})
    text = WORKLOADS_MD.read_text()
    first = sections(text)[0]
    doubled = text + "\n### " + first[1]
    names = [h.split()[0] for h, _ in sections(doubled)]
    assert names.count(first[0].split()[0]) == 2
