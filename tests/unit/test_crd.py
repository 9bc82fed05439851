"""The SchedulerProfile CRD must never drift from the engine's profile models."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopf_scheduler.cluster import crd
from kopf_scheduler.config.profile import SchedulerProfileSpec, to_camel
from kopf_scheduler.framework.profiles import load_profile

ROOT = Path(__file__).resolve().parents[2]


def _spec_schema() -> Mapping[str, Any]:
    doc = yaml.safe_load((ROOT / "crds" / "schedulerprofile.yaml").read_text())
    return doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_crd_file_is_generated_from_the_models() -> None:
    assert (ROOT / "crds" / "schedulerprofile.yaml").read_text() == crd.render(), (
        "crds/schedulerprofile.yaml is stale: python -m kopf_scheduler.cluster.crd --write"
    )


def _model_of(annotation: Any) -> type[Any] | None:
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _walk(model: type[Any], schema: Mapping[str, Any], path: str) -> None:
    props = schema.get("properties", {})
    hints = typing.get_type_hints(model)
    aliases = {to_camel(f.name): f for f in dataclasses.fields(model)}
    assert set(props) == set(aliases), f"{path}: CRD fields {sorted(props)} != model fields {sorted(aliases)}"
    for alias, field in aliases.items():
        sub = props[alias]
        nested = _model_of(hints[field.name])
        if nested is not None:
            _walk(nested, sub["items"] if sub["type"] == "array" else sub, f"{path}.{alias}")


def test_every_model_field_is_in_the_schema_and_nothing_else() -> None:
    _walk(SchedulerProfileSpec, _spec_schema(), "spec")


def _assert_structural(node: Mapping[str, Any], path: str) -> None:
    for banned in ("$ref", "anyOf", "oneOf", "allOf", "default", "title", "$defs"):
        assert banned not in node, f"{path}: {banned}"
    assert node.get("additionalProperties") is not False, path
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return
    assert "type" in node, f"{path}: no type"
    for key, sub in node.get("properties", {}).items():
        _assert_structural(sub, f"{path}.{key}")
    if node["type"] == "array":
        _assert_structural(node["items"], f"{path}[]")


def test_schema_is_structural() -> None:
    doc = yaml.safe_load(crd.render())
    _assert_structural(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "")


def test_conversions_of_pydantic_constructs() -> None:
    spec = _spec_schema()
    pct = spec["properties"]["percentageOfNodesToScore"]
    assert {k: v for k, v in pct.items() if k != "description"} == {
        "maximum": 100,
        "minimum": 0,
        "type": "integer",
        "nullable": True,
    }
    backoff = spec["properties"]["podInitialBackoffSeconds"]
    assert backoff["minimum"] == 0 and backoff["exclusiveMinimum"] is True
    args = spec["properties"]["pluginConfig"]["items"]["properties"]["args"]
    assert args["x-kubernetes-preserve-unknown-fields"] is True
    assert spec["required"] == ["schedulerName"]


def test_printer_columns() -> None:
    version = yaml.safe_load(crd.render())["spec"]["versions"][0]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["SchedulerName"] == ".spec.schedulerName"
    assert columns["Strategy"] == ".status.scoreStrategy"
    assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert version["subresources"] == {"status": {}}


def _undescribed(schema: Mapping[str, Any], path: str) -> list[str]:
    missing = []
    for name, sub in (schema.get("properties") or {}).items():
        if path == "schedulerprofile" and name == "metadata":
            continue  # the apiserver forbids a schema (description included) for ObjectMeta
        if not str(sub.get("description") or "").strip():
            missing.append(f"{path}.{name}")
        missing += _undescribed(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), Mapping):
        missing += _undescribed(schema["items"], f"{path}[]")
    return missing


def test_every_field_is_described_for_kubectl_explain() -> None:
    version = yaml.safe_load(crd.render())["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    assert root["description"]
    assert _undescribed(root, "schedulerprofile") == []
    spec = root["properties"]["spec"]["properties"]
    assert "spec.schedulerName" in spec["schedulerName"]["description"]  # the reference's meaning
    score = spec["plugins"]["properties"]["score"]
    assert "rank the nodes" in score["description"]  # the field's own text, not PluginSet's docstring
    assert (
        "Score extension point"
        in score["properties"]["enabled"]["items"]["properties"]["weight"]["description"]
    )


def test_unsupported_schema_is_rejected() -> None:
    with pytest.raises(ValueError, match="anyOf"):
        crd.structural_schema({"anyOf": [{"type": "string"}, {"type": "integer"}]})


def _validate(value: Any, schema: Mapping[str, Any], path: str = "spec") -> None:
    """A small structural-schema validator: types, required, bounds, unknown fields."""
    if value is None:
        assert schema.get("nullable"), f"{path}: null"
        return
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    kind = schema["type"]
    types: dict[str, type | tuple[type, ...]] = {
        "object": dict,
        "array": list,
        "string": str,
        "integer": int,
        "number": (int, float),
        "boolean": bool,
    }
    expected = types[kind]
    matches = isinstance(value, expected)  # kept apart: narrowing to a runtime type confuses mypy
    assert matches, f"{path}: {value!r} is not {kind}"
    if "minimum" in schema:
        assert value > schema["minimum"] if schema.get("exclusiveMinimum") else value >= schema["minimum"], (
            path
        )
    if "maximum" in schema:
        assert value <= schema["maximum"], path
    if kind == "object":
        for req in schema.get("required", ()):
            assert req in value, f"{path}.{req} is required"
        for key, sub in value.items():
            assert key in schema.get("properties", {}), f"{path}.{key}: unknown field"
            _validate(sub, schema["properties"][key], f"{path}.{key}")
    if kind == "array":
        for i, item in enumerate(value):
            _validate(item, schema["items"], f"{path}[{i}]")


@pytest.mark.parametrize("example", ["schedulerprofile-example.yaml", "schedulerprofile-gang.yaml"])
def test_example_profile_is_valid_for_crd_and_engine(example: str) -> None:
    docs = list(yaml.safe_load_all((ROOT / "manifests" / "custom-resources" / example).read_text()))
    profiles = [d for d in docs if d and d.get("kind") == "SchedulerProfile"]
    assert profiles
    for doc in profiles:
        assert doc["apiVersion"] == f"{crd.GROUP}/{crd.VERSION}"
        _validate(doc["spec"], _spec_schema())
        loaded = load_profile(doc["spec"])
        assert loaded.scheduler_name == doc["spec"]["schedulerName"]


def test_validator_catches_what_the_apiserver_would() -> None:
    schema = _spec_schema()
    with pytest.raises(AssertionError, match="unknown field"):
        _validate({"schedulerName": "x", "bogus": 1}, schema)
    with pytest.raises(AssertionError, match="required"):
        _validate({"plugins": {}}, schema)
    with pytest.raises(AssertionError, match="percentageOfNodesToScore"):
        _validate({"schedulerName": "x", "percentageOfNodesToScore": 101}, schema)


def test_field_names_are_spelled_as_pydantics_alias_generator_spells_them() -> None:
    """``to_camel`` stands in for pydantic's (not imported before the first validation)."""
    from pydantic.alias_generators import to_camel as pydantics

    from kopf_scheduler.config.profile import PluginConfig, PluginRef, Plugins, PluginSet

    names = [
        f.name
        for m in (SchedulerProfileSpec, Plugins, PluginSet, PluginRef, PluginConfig)
        for f in dataclasses.fields(m)
    ]
    assert len(names) > 20
    assert [to_camel(n) for n in names] == [pydantics(n) for n in names]
