"""Plugin capabilities are protocols checked at registration (issue 29): the Python counterpart of
Go's ``var _ fwk.FilterPlugin = &Fit{}``. A misspelt hook, a capability declared but not
implemented, implemented in part or without the extension point it extends fails loudly, naming
the plugin; every capability a plugin has is found once, when the framework is built."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.podgroup import PodGroup
from kopf_scheduler.config.profile import EXTENSION_POINTS, ProfileError
from kopf_scheduler.framework.extender import Extender
from kopf_scheduler.framework.interface import (
    CAPABILITIES,
    EXTENSION_POINT_PROTOCOLS,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    FilterPlugin,
    PlacementProgress,
    Plugin,
    PodGroupPostFilterResult,
    PodGroupSimulation,
    PostFilterResult,
    PreFilterResult,
    PreQueueingHintResult,
    SignFragments,
    Status,
    VectorFilter,
    protocol_methods,
)
from kopf_scheduler.framework.profiles import default_profile, load_profile
from kopf_scheduler.framework.registry import (
    PluginCapabilityError,
    PluginImportError,
    Registry,
    capability_problems,
    default_registry,
)
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.framework.types import NodeInfo


class Fit(Plugin):
    """A Filter plugin, to be misspelt below."""

    name = "Fit"

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        return None


def test_a_misspelt_hook_is_refused_at_registration() -> None:
    class Misspelt(Fit):
        def filter_vectr(self, state: CycleState, pod: Pod, snapshot: Any, idx: np.ndarray) -> np.ndarray:
            return np.ones(len(idx), dtype=bool)

    with pytest.raises(PluginCapabilityError) as err:
        Registry().register("Fit", Misspelt)
    assert str(err.value) == (
        f"plugin 'Fit' ({__name__}:test_a_misspelt_hook_is_refused_at_registration.<locals>.Misspelt) "
        "has filter_vectr(), which is no hook: a misspelt filter_vector()?"
    )


def test_a_declared_capability_must_be_implemented() -> None:
    class Declared(Plugin, FilterPlugin, VectorFilter):  # the declaration, without filter_vector
        name = "Declared"

        def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
            return None

    assert capability_problems(Declared) == ["declares VectorFilter but does not implement filter_vector"]

    class Implemented(Declared):
        def filter_vector(self, state: CycleState, pod: Pod, snapshot: Any, idx: np.ndarray) -> np.ndarray:
            return np.ones(len(idx), dtype=bool)

    assert capability_problems(Implemented) == []


def test_a_capability_implemented_in_part_or_without_its_point_is_refused() -> None:
    class Half(Plugin):
        def pre_filter(
            self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
        ) -> tuple[PreFilterResult | None, Status | None]:
            return None, None

        def add_pod(self, state: CycleState, pod: Pod, other: Pod, info: NodeInfo) -> Status | None:
            return None

    class Orphan(Plugin):
        def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Status | None:
            return None

    class Unreserving(Plugin):  # Reserve is reserve and unreserve
        def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
            return None

    assert capability_problems(Half) == ["implements PreFilterExtensions in part: add_pod without remove_pod"]
    assert capability_problems(Orphan) == [
        "implements ScoreExtensions (normalize_score) but not the ScorePlugin it extends (score)"
    ]
    assert capability_problems(Unreserving) == ["implements ReservePlugin in part: reserve without unreserve"]


def test_a_loaded_target_is_checked_and_its_profile_refused_naming_it() -> None:
    class Misspelt(Fit):
        def score_vectorr(self, state: CycleState, pod: Pod, snapshot: Any, idx: np.ndarray) -> None:
            return None

    class EntryPoint:  # an out-of-tree plugin's entry point, loaded when a profile names it
        value = "outoftree:Misspelt"

        def load(self) -> type:
            return Misspelt

    registry = default_registry()
    registry.register("Fit", EntryPoint())  # not loaded yet: not checked yet
    with pytest.raises(PluginCapabilityError):
        registry.get_class("Fit")
    assert issubclass(PluginCapabilityError, PluginImportError)
    with pytest.raises(ProfileError) as err:
        load_profile({"schedulerName": "t", "plugins": {"filter": {"enabled": [{"name": "Fit"}]}}}, registry)
    assert str(err.value).endswith(
        "plugin 'Fit' (entry point outoftree:Misspelt) has score_vectorr(), which is no hook: "
        "a misspelt score_vector()?"
    )


def test_every_in_tree_plugin_passes_the_check() -> None:
    registry = default_registry()
    for name in registry:
        assert capability_problems(registry.get_class(name)) == [], name


def test_the_profile_apis_points_are_the_protocols() -> None:
    """config's extension points (what a profile may name) and the protocols a plugin there needs agree."""
    for point, methods in EXTENSION_POINTS.items():
        assert protocol_methods(EXTENSION_POINT_PROTOCOLS[point]) == methods, point
    for capability, point in CAPABILITIES.items():
        assert protocol_methods(capability), capability
        assert point is None or point in EXTENSION_POINT_PROTOCOLS.values()


class Everything(Plugin):
    """One plugin with every optional capability (and the extension points they extend)."""

    name = "Everything"

    def pre_enqueue(self, pod: Pod) -> Status | None:
        return None

    def pre_enqueue_shared_by(self, pod: Pod) -> str | None:
        return None

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        return None, None

    def add_pod(self, state: CycleState, pod: Pod, other: Pod, info: NodeInfo) -> Status | None:
        return None

    def remove_pod(self, state: CycleState, pod: Pod, other: Pod, info: NodeInfo) -> Status | None:
        return None

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        return None

    def filter_vector(self, state: CycleState, pod: Pod, snapshot: Any, idx: np.ndarray) -> np.ndarray | None:
        return None

    def filter_statuses(
        self, state: CycleState, pod: Pod, snapshot: Any, rows: np.ndarray
    ) -> Sequence[Status] | None:
        return None

    def post_filter(
        self, state: CycleState, pod: Pod, node_statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status | None]:
        return None, Status.unschedulable()

    async def post_filter_with_extenders(
        self, state: CycleState, pod: Pod, node_statuses: Mapping[str, Status], extenders: Sequence[Extender]
    ) -> tuple[PostFilterResult | None, Status | None]:
        return None, Status.unschedulable()

    def preemption_started(self, pod_uid: str) -> None: ...

    def preemption_finished(self, pod_uid: str) -> None: ...

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        return 0, None

    def score_vector(self, state: CycleState, pod: Pod, snapshot: Any, idx: np.ndarray) -> np.ndarray | None:
        return None

    def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Status | None:
        return None

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return None

    def pre_bind_pre_flight(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return None

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        return []

    def pre_queueing_keys(self, pod: Pod) -> list[str]:
        return []

    def pre_queueing_hint(self, event: ClusterEvent, old: Any, new: Any) -> PreQueueingHintResult | None:
        return None

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        return (), None

    def placement_feasible(self, group: PodGroup, progress: PlacementProgress) -> Status | None:
        return None

    def pod_group_post_filter(
        self, state: CycleState, group: PodGroup, members: Sequence[Pod], simulation: PodGroupSimulation
    ) -> tuple[PodGroupPostFilterResult | None, Status | None]:
        return None, Status.unschedulable()

    def pod_group_preemption_started(self, group_key: str) -> None: ...

    def pod_group_preemption_finished(self, group_key: str) -> None: ...


def test_each_capability_is_found_when_the_framework_is_built() -> None:
    registry = default_registry()
    registry.register("Everything", Everything)
    enabled = [{"name": n} for n in ("PrioritySort", "DefaultBinder", "Everything")]
    plugins = {"multiPoint": {"enabled": enabled, "disabled": [{"name": "*"}]}}
    fw = Framework(load_profile({"schedulerName": "t", "plugins": plugins}, registry), registry)
    # PodGroupPostFilter too: no profile API's point here, the enabled plugins that have it take part.
    expected = [*(c.__name__ for c in CAPABILITIES), "PodGroupPostFilterPlugin"]
    assert sorted(fw.capabilities) == sorted(expected)
    assert all(names == ["Everything"] for names in fw.capabilities.values()), fw.capabilities
    assert fw.normalizing_plugins == {"Everything"}
    assert fw.async_preemption_plugins == [fw.plugins["Everything"]]
    assert fw.queueing_hints()["Everything"] == []


def test_the_default_profiles_capabilities() -> None:
    fw = Framework(default_profile())
    caps = fw.capabilities
    assert {"NodeResourcesFit", "TaintToleration", "NodeAffinity"} <= set(caps["VectorFilter"])
    assert "NodeResourcesFit" in caps["FilterStatuses"]
    assert {"NodeResourcesFit", "NodeResourcesBalancedAllocation"} <= set(caps["VectorScore"])
    assert {"InterPodAffinity", "PodTopologySpread"} <= set(caps["PreFilterExtensions"])
    assert caps["PostFilterWithExtenders"] == ["DefaultPreemption"]
    assert caps["AsyncPreemptionPlugin"] == ["DefaultPreemption"]
    assert caps["PreQueueingHints"] == ["DynamicResources"]
