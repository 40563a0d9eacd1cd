"""Spec loading and validation: every error names the file, the field path and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from suite.spec import SpecError, parse_override, read_spec_file
from suite.specload import load_spec, validate_spec


def write(tmp_path: Path, data: dict, name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data), encoding="utf-8")
    return p


@pytest.fixture
def digits_data(digits_path):
    return read_spec_file(digits_path)


def test_digits_spec_loads_and_hash_is_stable(digits_path):
    a, b = load_spec(digits_path), load_spec(digits_path)
    assert a.name == "cv/digits_cnn" and a.target.value == 0.97
    assert a.spec_hash() == b.spec_hash() and len(a.spec_hash()) == 16


def test_hash_changes_with_any_override(digits_path):
    base = load_spec(digits_path)
    lr = load_spec(digits_path, {"optimizer.lr": 0.01})
    assert lr.optimizer.lr == 0.01 and lr.spec_hash() != base.spec_hash()


def test_hash_ignores_prose_tiers_variants_and_noise_floor(digits_path):
    base = load_spec(digits_path)
    edited = load_spec(digits_path, {"description": "new words", "target.provenance": "another source",
                                     "tiers": ["smoke", "standard"], "variants.huge": {"model.hidden": 512},
                                     "compare.noise_floor": 0.1})
    assert edited.spec_hash() == base.spec_hash()
    assert load_spec(digits_path, {"target.value": 0.98}).spec_hash() != base.spec_hash()


def test_target_value_must_be_positive(tmp_path, digits_data):
    digits_data["target"]["value"] = 0
    path = write(tmp_path, digits_data)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert str(e.value) == f"{path}: target.value: Input should be greater than 0"


def test_unknown_key_is_named(tmp_path, digits_data):
    digits_data["optimiser"] = {"lr": 1}
    path = write(tmp_path, digits_data)
    with pytest.raises(SpecError, match=r"spec\.yaml: optimiser: unknown field"):
        load_spec(path)


def test_unknown_key_in_a_component_block_is_named(tmp_path, digits_data):
    digits_data["model"]["chanels"] = [8]
    path = write(tmp_path, digits_data)
    with pytest.raises(SpecError, match=r"model\.chanels: unknown field"):
        load_spec(path)


def test_wrong_type_is_named(tmp_path, digits_data):
    digits_data["data"]["batch_size"] = "lots"
    with pytest.raises(SpecError, match=r"data\.batch_size: Input should be a valid integer"):
        load_spec(write(tmp_path, digits_data))


def test_missing_field_is_named(tmp_path, digits_data):
    del digits_data["target"]
    with pytest.raises(SpecError, match=r"spec\.yaml: target: Field required"):
        load_spec(write(tmp_path, digits_data))


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match=r"nope\.yaml: no such file"):
        load_spec(tmp_path / "nope.yaml")


def test_unknown_model_arch_lists_the_known_ones(tmp_path, digits_data):
    digits_data["model"]["arch"] = "transformerz"
    with pytest.raises(SpecError, match=r"model: unknown model arch 'transformerz'; known: .*cnn"):
        load_spec(write(tmp_path, digits_data))


@pytest.mark.parametrize("name", ["../../etc", "/etc/passwd", "cv/../x", "cv/a/b", "CV/x", "cv"])
def test_path_traversal_in_names_is_refused(tmp_path, digits_data, name):
    digits_data["name"] = name
    with pytest.raises(SpecError, match=r"name: Value error, must be `<domain>/<name>`"):
        load_spec(write(tmp_path, digits_data))


def test_yaml_tags_are_refused(tmp_path):
    p = tmp_path / "evil.yaml"
    p.write_text("name: !!python/object/apply:os.system ['echo pwned']\n", encoding="utf-8")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(p)


def test_duplicate_keys_are_refused(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("name: cv/a\nname: cv/b\n", encoding="utf-8")
    with pytest.raises(SpecError, match="duplicate key 'name'"):
        load_spec(p)


def test_oversized_file_is_refused(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("x: " + "a" * 300_000, encoding="utf-8")
    with pytest.raises(SpecError, match="a spec may be at most"):
        load_spec(p)


def test_negative_budget(tmp_path, digits_data):
    digits_data["budget"]["max_train_s"] = -5
    with pytest.raises(SpecError, match=r"budget\.max_train_s: Input should be greater than 0"):
        load_spec(write(tmp_path, digits_data))


def test_overrides_parse_yaml_values():
    assert parse_override("optimizer.lr=0.01") == ("optimizer.lr", 0.01)
    assert parse_override("model.channels=[8, 16]") == ("model.channels", [8, 16])
    assert parse_override("eval.at_start=true") == ("eval.at_start", True)


@pytest.mark.parametrize("bad", ["optimizer.lr", "=3", "a..b=1"])
def test_bad_set_syntax(bad):
    with pytest.raises(SpecError, match=r"--set"):
        parse_override(bad)


def test_bad_set_value_is_validated_like_the_file(digits_path):
    with pytest.raises(SpecError, match=r"optimizer\.lr: Input should be greater than 0"):
        load_spec(digits_path, {"optimizer.lr": -1})
    with pytest.raises(SpecError, match=r"optimizer\.lrr|unknown field"):
        load_spec(digits_path, {"optimizerr.lr": 1})


def test_variant_applies_and_unknown_variant_is_named(digits_path):
    tiny = load_spec(digits_path, variant="tiny")
    assert tiny.model.params()["channels"] == [4] and tiny.budget.max_steps == 40
    with pytest.raises(SpecError, match=r"no variant 'huge' \(this spec has: tiny\)"):
        load_spec(digits_path, variant="huge")


def test_every_shipped_spec_is_valid():
    from suite import registry

    files = registry.workload_files()
    assert "cv/digits_cnn" in files
    for name, path in files.items():
        spec = load_spec(path)
        assert spec.name == name, f"{path}: name {spec.name!r} does not match its place under workloads/"
        assert spec.domain == name.split("/")[0]
        assert spec.target.provenance.strip()


def test_schema_is_json_schema():
    from suite.spec import json_schema

    schema = json_schema()
    assert schema["type"] == "object" and "target" in schema["properties"]
    assert schema["additionalProperties"] is False


def test_validate_spec_reports_several_problems_at_once(digits_data):
    digits_data["target"]["value"] = -1
    digits_data["eval"]["every_steps"] = 0
    with pytest.raises(SpecError) as e:
        validate_spec(digits_data, "mem.yaml")
    assert {loc for loc, _ in e.value.problems} == {"target.value", "eval.every_steps"}
