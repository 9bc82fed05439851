"""Profile parsing, default merging, multiPoint expansion, weights and validation errors."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from kopf_scheduler.config.profile import (
    DEFAULT_MULTI_POINT,
    Plugins,
    ProfileError,
    adapter,
    merge_plugins,
    profile_json_schema,
)
from kopf_scheduler.framework.interface import Plugin
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import IN_TREE, Registry, default_registry


class Sort(Plugin):
    name = "Sort"

    def less(self, a: Any, b: Any) -> bool:
        return False


class Binder(Plugin):
    name = "Binder"

    async def bind(self, state: Any, pod: Any, node_name: str) -> None:
        return None


class FilterScore(Plugin):
    name = "FilterScore"

    class Args(BaseModel):
        model_config = ConfigDict(populate_by_name=True, extra="forbid")
        limit: int = Field(default=3, alias="limit", ge=0)

    def filter(self, state: Any, pod: Any, node_info: Any) -> None:
        return None

    def score(self, state: Any, pod: Any, node_info: Any) -> tuple[int, None]:
        return 0, None


class OnlyFilter(Plugin):
    name = "OnlyFilter"

    def filter(self, state: Any, pod: Any, node_info: Any) -> None:
        return None


def registry() -> Registry:
    return Registry({"Sort": Sort, "Binder": Binder, "FilterScore": FilterScore, "OnlyFilter": OnlyFilter})


def custom(**plugins: Any) -> dict[str, Any]:
    """A profile without the defaults ("*" at multiPoint) that enables Sort and Binder everywhere."""
    body: dict[str, Any] = {p: {} for p in ("queueSort", "preFilter", "filter", "score", "bind")}
    body["multiPoint"] = {"enabled": [{"name": "Sort"}, {"name": "Binder"}], "disabled": [{"name": "*"}]}
    for point, value in plugins.items():
        body[point] = {**value, "disabled": [{"name": "*"}]} if point == "multiPoint" else value
    return {"schedulerName": "test", "plugins": body}


def test_default_plugins_and_weights_match_the_reference() -> None:
    merged = merge_plugins(None)
    enabled = [(p.name, p.weight) for p in merged.multi_point.enabled]
    # v1.37.2 getDefaultPlugins + applyFeatureGates (NodeDeclaredFeatures GA, appended last;
    # DynamicResourceAllocation GA: DynamicResources, weight 2, right before DefaultPreemption).
    assert enabled == [
        ("SchedulingGates", None),
        ("PrioritySort", None),
        ("NodeName", None),
        ("NodeUnschedulable", None),
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodePorts", None),
        ("NodeResourcesFit", 1),
        ("VolumeRestrictions", None),
        ("NodeVolumeLimits", None),
        ("VolumeBinding", None),
        ("VolumeZone", None),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("DynamicResources", 2),
        ("DefaultPreemption", None),
        ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1),
        ("DefaultBinder", None),
        ("NodeDeclaredFeatures", None),
    ]
    weights = {n: w for n, w in enabled if w is not None}
    assert weights == {
        "TaintToleration": 3,
        "NodeAffinity": 2,
        "NodeResourcesFit": 1,
        "PodTopologySpread": 2,
        "InterPodAffinity": 2,
        "DynamicResources": 2,
        "NodeResourcesBalancedAllocation": 1,
        "ImageLocality": 1,
    }
    assert set(IN_TREE) >= {n for n, _ in DEFAULT_MULTI_POINT}


def test_merge_replaces_default_in_place_and_star_disables() -> None:
    custom_plugins = adapter(Plugins).validate_python(
        {"multiPoint": {"enabled": [{"name": "NodeAffinity", "weight": 7}, {"name": "Extra"}]}}
    )
    merged = merge_plugins(custom_plugins)
    names = [p.name for p in merged.multi_point.enabled]
    assert names.index("NodeAffinity") == 5  # kept in the default position
    assert next(p.weight for p in merged.multi_point.enabled if p.name == "NodeAffinity") == 7
    assert names[-1] == "Extra"
    star = merge_plugins(adapter(Plugins).validate_python({"multiPoint": {"disabled": [{"name": "*"}]}}))
    assert star.multi_point.enabled == []
    # merging is idempotent
    assert merge_plugins(merged).multi_point.enabled == merged.multi_point.enabled


def test_multipoint_expands_to_implemented_points_with_weights() -> None:
    spec = custom(
        multiPoint={"enabled": [{"name": "Sort"}, {"name": "Binder"}, {"name": "FilterScore", "weight": 4}]}
    )
    prof = load_profile(spec, registry())
    r = prof.resolved
    assert r is not None
    assert r.points["filter"] == ["FilterScore"]
    assert r.points["score"] == ["FilterScore"]
    assert r.points["queueSort"] == ["Sort"]
    assert r.points["bind"] == ["Binder"]
    assert r.weights == {"FilterScore": 4}
    assert r.args["FilterScore"].limit == 3  # default Args instance


def test_explicit_point_overrides_multipoint_order_and_weight() -> None:
    spec = custom(
        multiPoint={"enabled": [{"name": "Sort"}, {"name": "Binder"}, {"name": "FilterScore", "weight": 4}]},
        filter={"enabled": [{"name": "OnlyFilter"}, {"name": "FilterScore"}]},
        score={"enabled": [{"name": "FilterScore", "weight": 9}]},
    )
    r = load_profile(spec, registry()).resolved
    assert r is not None
    # overrides first (in explicit order), then multiPoint-only, then the other explicit ones
    assert r.points["filter"] == ["FilterScore", "OnlyFilter"]
    assert r.weights["FilterScore"] == 9


def test_disabled_at_one_point_keeps_other_points() -> None:
    spec = custom(
        multiPoint={"enabled": [{"name": "Sort"}, {"name": "Binder"}, {"name": "FilterScore"}]},
        score={"disabled": [{"name": "FilterScore"}]},
    )
    r = load_profile(spec, registry()).resolved
    assert r is not None
    assert r.points["filter"] == ["FilterScore"]
    assert r.points["score"] == []


@pytest.mark.parametrize(
    ("mutate", "path", "text"),
    [
        (
            lambda s: s["plugins"]["filter"].update(enabled=[{"name": "Nope"}]),
            "plugins.filter.enabled[0].name",
            "unknown plugin 'Nope'",
        ),
        (
            lambda s: s["plugins"]["score"].update(enabled=[{"name": "OnlyFilter"}]),
            "plugins.score.enabled[0].name",
            "does not extend score",
        ),
        (
            lambda s: s["plugins"]["score"].update(enabled=[{"name": "FilterScore", "weight": -2}]),
            "plugins.score.enabled[0].weight",
            "greater than or equal to 0",
        ),
        (
            lambda s: s.update(pluginConfig=[{"name": "FilterScore", "args": {"limit": -1}}]),
            "pluginConfig[0].args.limit",
            "greater than or equal to 0",
        ),
        (
            lambda s: s.update(pluginConfig=[{"name": "FilterScore", "args": {"bogus": 1}}]),
            "pluginConfig[0].args.bogus",
            "Extra inputs",
        ),
        (
            lambda s: s.update(pluginConfig=[{"name": "Sort", "args": {"x": 1}}]),
            "pluginConfig[0].args",
            "takes no args",
        ),
        (
            lambda s: s.update(percentageOfNodesToScore=101),
            "percentageOfNodesToScore",
            "less than or equal to 100",
        ),
        (
            lambda s: s.update(podMaxBackoffSeconds=0.5),
            "podMaxBackoffSeconds",
            "greater than or equal to podInitialBackoffSeconds",
        ),
        (lambda s: s.update(unknownField=1), "unknownField", "Extra inputs"),
        (lambda s: s.update(schedulerName=""), "schedulerName", "at least 1"),
        (
            lambda s: s["plugins"]["multiPoint"].update(enabled=[{"name": "Binder"}]),
            "plugins.queueSort",
            "exactly one queue sort",
        ),
    ],
)
def test_validation_errors_name_the_field(mutate: Any, path: str, text: str) -> None:
    spec = custom()
    mutate(spec)
    with pytest.raises(ProfileError) as info:
        load_profile(spec, registry())
    matching = [msg for p, msg in info.value.errors if p == path]
    assert matching, info.value.errors
    assert any(text in m for m in matching), matching


def test_plugin_that_does_not_import_fails_only_profiles_naming_it() -> None:
    reg = registry()
    reg.register("Broken", "kopf_scheduler.plugins.does_not_exist:Broken")
    load_profile(custom(), reg)  # fine: nobody names Broken
    spec = custom(filter={"enabled": [{"name": "Broken"}]})
    with pytest.raises(
        ProfileError, match=r"plugins.filter.enabled\[0\].name: plugin 'Broken'.*cannot be loaded"
    ):
        load_profile(spec, reg)


def test_default_registry_has_in_tree_names() -> None:
    reg = default_registry()
    assert set(IN_TREE) <= set(reg)


def test_json_schema_uses_camel_case() -> None:
    schema = profile_json_schema()
    assert {"schedulerName", "plugins", "pluginConfig", "percentageOfNodesToScore"} <= set(
        schema["properties"]
    )
    assert schema["required"] == ["schedulerName"]


def test_backoff_defaults() -> None:
    prof = load_profile(custom(), registry())
    assert (prof.pod_initial_backoff_seconds, prof.pod_max_backoff_seconds) == (1.0, 10.0)
