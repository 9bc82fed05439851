"""The default profile is built from our own constants without validating them (issue 30's cold
start): what is constructed must equal what validation would give, and the way to the first bind
must not even import pydantic (the profile and the plugins' args are dataclasses it validates)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from pydantic import BaseModel

from kopf_scheduler.config import features
from kopf_scheduler.config.profile import (
    ProfileError,
    ValidDefaults,
    adapter,
    default_args,
    default_spec,
    merge_plugins,
    parse_profile,
)
from kopf_scheduler.framework.interface import Plugin
from kopf_scheduler.framework.profiles import default_profile, load_profile
from kopf_scheduler.framework.registry import IN_TREE, default_registry
from kopf_scheduler.plugins.node_resources_fit import ScoringStrategy
from kopf_scheduler.plugins.resource_allocation import ResourceSpec, default_resources
from kopf_scheduler.plugins.volume_binding.args import UtilizationShapePoint, default_shape


def _shape(value: Any) -> Any:
    """A dataclass as plain data with, at every level, its type and every attribute (fields and the
    derived ones its ``__post_init__`` sets)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value), {name: _shape(v) for name, v in vars(value).items()})
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return (type(value), value)


@pytest.mark.parametrize("gates", ["", "GenericWorkload=true"])
@pytest.mark.parametrize("name", ["kopf-scheduler", "mine"])
def test_default_spec_is_what_validation_gives(name: str, gates: str) -> None:
    with features.using(features.FeatureGates.parse(gates)):
        validated = parse_profile({"schedulerName": name})
        constructed = default_spec(name)
    assert constructed == validated
    assert _shape(constructed) == _shape(validated)
    names = [ref.name for ref in constructed.plugins.multi_point.enabled] if constructed.plugins else []
    assert ("GangScheduling" in names) == ("GenericWorkload" in gates)


def test_default_plugins_are_what_validation_gives() -> None:
    validated = parse_profile({"schedulerName": "x", "plugins": {}}).plugins
    assert _shape(merge_plugins(None)) == _shape(validated)


def test_an_empty_name_is_refused_as_validation_refuses_it() -> None:
    with pytest.raises(ProfileError) as constructed:
        default_spec("")
    with pytest.raises(ProfileError) as validated:
        parse_profile({"schedulerName": ""})
    assert (
        constructed.value.errors
        == validated.value.errors
        == [("schedulerName", "String should have at least 1 character")]
    )


def test_default_profile_resolves_as_a_loaded_one() -> None:
    loaded = load_profile({"schedulerName": "kopf-scheduler"})
    default = default_profile()
    assert default == loaded
    assert default.resolved is not None and loaded.resolved is not None
    assert default.resolved.points == loaded.resolved.points
    assert default.resolved.weights == loaded.resolved.weights
    assert default.resolved.args == loaded.resolved.args


IN_TREE_ARGS = sorted(
    {m for m in map(default_registry().args_model, IN_TREE) if m is not None}, key=lambda m: m.__name__
)


@pytest.mark.parametrize("model", IN_TREE_ARGS, ids=lambda m: m.__name__)
def test_in_tree_default_args_are_what_validation_gives(model: type[Any]) -> None:
    assert issubclass(model, ValidDefaults) and dataclasses.is_dataclass(model)
    constructed = default_args(model)
    assert _shape(constructed) == _shape(adapter(model).validate_python({}))
    # Validated again from scratch, nested defaults included (the default factories construct too).
    revalidated = adapter(model).validate_python(adapter(model).dump_python(constructed, by_alias=True))
    assert _shape(constructed) == _shape(revalidated)


def test_constructed_nested_defaults_are_what_validation_gives() -> None:
    assert _shape(ScoringStrategy()) == _shape(adapter(ScoringStrategy).validate_python({}))
    resources = [{"name": n, "weight": 1} for n in ("cpu", "memory")]
    assert _shape(default_resources()) == _shape(adapter(list[ResourceSpec]).validate_python(resources))
    points = [{"utilization": u, "score": s} for u, s in ((0, 10), (100, 0))]
    assert _shape(default_shape()) == _shape(adapter(list[UtilizationShapePoint]).validate_python(points))


class _Required(BaseModel):  # an out-of-tree plugin's args may still be a pydantic model
    size: int


class _NeedsArgs(Plugin):
    name = "NeedsArgs"
    Args = _Required

    def filter(self, state: Any, pod: Any, node_info: Any) -> None:
        return None


def test_args_without_valid_defaults_are_still_validated() -> None:
    """An Args model that is not ours (no ValidDefaults) is validated: one without defaults is an error."""
    registry = default_registry().copy()
    registry.register("NeedsArgs", _NeedsArgs)
    spec = {"schedulerName": "x", "plugins": {"multiPoint": {"enabled": [{"name": "NeedsArgs"}]}}}
    with pytest.raises(ProfileError, match="plugin 'NeedsArgs' needs args: Field required"):
        load_profile(spec, registry)


def test_the_way_to_the_first_bind_does_not_import_pydantic() -> None:
    """A fresh process that resolves run's flags without --config, imports the runtime and builds the
    default engine, as ``run`` does, never imports pydantic (~50 ms): the profile and the default
    plugins' args are constructed dataclasses; nor PyYAML."""
    code = textwrap.dedent(
        """
        import argparse
        import sys

        from kopf_scheduler.cluster import run
        from kopf_scheduler.cluster.runconfig import resolve

        parser = argparse.ArgumentParser()
        run.add_arguments(parser)
        resolve(parser.parse_args([]))  # run without --config: the default configuration, checked
        import kopf_scheduler.cluster.runtime
        from kopf_scheduler.engine import new_engine
        from kopf_scheduler.memory_client import MemoryClusterClient

        engine = new_engine(MemoryClusterClient(), (), with_default=True)
        profile = engine.profiles.get("kopf-scheduler").profile
        assert len(profile.resolved.args) > 5, profile.resolved.args  # the default plugins' args
        print(sorted(m for m in ("pydantic", "pydantic_core", "yaml") if m in sys.modules))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"
    # And validating a profile afterwards imports it, with the usual messages.
    with pytest.raises(ProfileError, match="podMaxBackoffSeconds"):
        parse_profile({"schedulerName": "x", "podInitialBackoffSeconds": 5, "podMaxBackoffSeconds": 1})
