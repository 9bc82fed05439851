"""The default profile is built from our own constants without validating them (issue 30's cold
start): what is constructed must equal what validation would give, and the way to the first bind
must build no pydantic validator at all."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
from pydantic import BaseModel

from kopf_scheduler.config import features
from kopf_scheduler.config.profile import ProfileError, default_spec, merge_plugins, parse_profile
from kopf_scheduler.framework.profiles import default_profile, load_profile


def _shape(value: Any) -> Any:
    """A model as plain data with, at every level, its type and which fields count as set."""
    if isinstance(value, BaseModel):
        return (
            type(value),
            sorted(value.model_fields_set),
            {name: _shape(getattr(value, name)) for name in type(value).model_fields},
            value.__pydantic_private__,
        )
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


def test_the_way_to_the_first_bind_builds_no_validator() -> None:
    """A fresh process that imports the runtime and builds the default engine, as ``run`` does
    without --config, leaves every model of config deferred: nothing of ours was validated."""
    code = textwrap.dedent(
        """
        import kopf_scheduler.cluster.runtime
        from kopf_scheduler.engine import new_engine
        from kopf_scheduler.memory_client import MemoryClusterClient
        from kopf_scheduler.config import profile

        engine = new_engine(MemoryClusterClient(), (), with_default=True)
        assert "kopf-scheduler" in engine.profiles
        models = [profile.SchedulerProfileSpec, profile.Plugins, profile.PluginSet, profile.PluginRef,
                  profile.PluginConfig]
        print(sorted(m.__qualname__ for m in models if m.__pydantic_complete__))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    # And validating a profile afterwards builds them, with the usual messages.
    with pytest.raises(ProfileError, match="podMaxBackoffSeconds"):
        parse_profile({"schedulerName": "x", "podInitialBackoffSeconds": 5, "podMaxBackoffSeconds": 1})
