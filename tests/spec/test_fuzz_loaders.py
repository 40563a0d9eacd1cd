"""Property-based fuzzing (hypothesis) of the spec loader and the result reader: whatever the input, the only
exception that escapes is the project's own SpecError / ResultError, and what is accepted is usable."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.faults import digits_data

from benchmarks.sim.results import make_result
from suite.results.record import ResultError, parse_result, result_path
from suite.spec import SpecError, parse_override, parse_yaml
from suite.specload import validate_spec

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BASE_SPEC = digits_data()
BASE_RESULT = json.loads(make_result().model_dump_json())

# the text hypothesis builds YAML and JSON from: structure characters, tags, anchors, and anything at all
YAML_CHARS = st.sampled_from(list(":-[]{}&*!|>'\"#%@`,?\n\t ") + ["!!python/object:", "!!binary ", "<<: ", "\\u"])
yaml_like = st.lists(st.one_of(YAML_CHARS, st.text(max_size=8)), max_size=40).map("".join)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["cnn", "digits", "torch", "smoke", "max", "../../etc", ":", "..x:y"]),
)
values = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                      st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                      max_leaves=12)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: Any, base: dict) -> dict:
    """The base document with a few of its values replaced, removed, or new keys added, anywhere in it."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(values)
    return doc


@FUZZ
@given(yaml_like)
def test_parse_yaml_raises_only_spec_error(text):
    try:
        parse_yaml(text, "fuzz.yaml")
    except SpecError as e:
        assert str(e).startswith("fuzz.yaml: ")


@FUZZ
@given(st.one_of(mutated(BASE_SPEC), st.dictionaries(st.text(max_size=8), values, max_size=6)),
       st.sampled_from([None, "tiny", "nosuch"]))
def test_validate_spec_raises_only_spec_error_and_accepts_only_usable_specs(data, variant):
    if variant == "tiny":
        data.setdefault("variants", {"tiny": {"budget.max_steps": 3}}) if isinstance(data, dict) else None
    try:
        spec = validate_spec(data, "fuzz.yaml", variant=variant)
    except SpecError as e:
        assert str(e).startswith("fuzz.yaml"), str(e)
        return
    # accepted: it hashes, round-trips through YAML, and revalidates to the same spec
    assert len(spec.spec_hash()) == 16
    again = validate_spec(yaml.safe_load(yaml.safe_dump(spec.canonical())), "again.yaml")
    assert again.spec_hash() == spec.spec_hash()


@FUZZ
@given(st.one_of(st.text(max_size=30), st.tuples(st.sampled_from(["optimizer.lr", "budget.max_steps", "model",
                                                                  "a..b", "", "tiers", "name"]),
                                                 yaml_like).map("=".join)))
def test_parse_override_and_apply_raise_only_spec_error(text):
    try:
        key, value = parse_override(text)
        validate_spec(copy.deepcopy(BASE_SPEC), "fuzz.yaml", {key: value})
    except SpecError:
        pass


@FUZZ
@given(st.one_of(st.text(max_size=60), st.binary(max_size=60).map(lambda b: b.decode("latin-1")), yaml_like))
def test_parse_result_raises_only_result_error_on_any_text(text):
    try:
        parse_result(text, "fuzz.json")
    except ResultError as e:
        assert str(e).startswith("fuzz.json: ")


@FUZZ
@given(mutated(BASE_RESULT), st.sampled_from(["json", "truncate"]), st.integers(0, 2000))
def test_parse_result_on_mutated_results(doc, how, cut):
    text = json.dumps(doc, allow_nan=True)
    if how == "truncate":
        text = text[: cut % max(1, len(text))]
    try:
        r = parse_result(text, "fuzz.json")
    except ResultError as e:
        assert str(e).startswith("fuzz.json: ")
        return
    again = parse_result(r.model_dump_json(), "again.json")  # what was accepted writes and reads back
    assert again.run_id == r.run_id and again.status == r.status


NAMES = st.text(max_size=30) | st.sampled_from(["../../etc", "..", ".", "/abs", "a/../../b", "\x00", "~root"])


@FUZZ
@given(NAMES, NAMES, NAMES, NAMES)
def test_result_path_stays_inside_the_results_folder(workload, backend, hardware, run_id):
    r = make_result(workload=workload, backend=backend, run_id=run_id)
    r.hardware.slug = hardware
    root = Path("/srv/results")
    path = result_path(root, r)
    assert path.parent.parent.parent.parent.parent == root  # <hw>/<domain>/<name>/<backend>/<file>
    assert all(part not in ("", ".", "..") for part in path.relative_to(root).parts)
    assert "\x00" not in str(path) and path.suffix == ".json"
