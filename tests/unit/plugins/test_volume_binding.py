"""VolumeBinding, table-driven after the reference's volume_binding_test.go, plus assume and PreBind."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from _volume_helpers import (
    FakeHandle,
    claim_volume,
    node_info,
    objects,
    pod_with,
    pod_with_claims,
    pv,
    pvc,
    store,
    view,
)
from _volume_helpers import storage_class as sc

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.storage import (
    ClaimRef,
    CSIDriver,
    CSIStorageCapacity,
    parse_csi_driver,
    parse_csi_node,
    parse_csi_storage_capacity,
)
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.config.profile import adapter
from kopf_scheduler.framework.client import ApiError
from kopf_scheduler.framework.interface import (
    ActionType,
    Code,
    CycleState,
    EventResource,
    QueueingHint,
    Status,
)
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.plugins.volume_binding import VolumeBinding, VolumeBindingArgs

IMMEDIATE = sc("immediate-sc", "Immediate")
WAIT = sc("wait-sc", "WaitForFirstConsumer")
WAIT_HDD = sc("wait-hdd-sc", "WaitForFirstConsumer")
DYNAMIC = sc("dyn-sc", "WaitForFirstConsumer", provisioner="csi.example.com")
ZONED = sc(
    "zoned-sc",
    "WaitForFirstConsumer",
    provisioner="csi.example.com",
    allowed_topologies=[{"topology.kubernetes.io/zone": ["zone-a"]}],
)
CLASSES = (IMMEDIATE, WAIT, WAIT_HDD, DYNAMIC, ZONED)
HOST = "kubernetes.io/hostname"

BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"


def _plugin(
    pvcs: Sequence[dict[str, Any]] = (),
    pvs: Sequence[dict[str, Any]] = (),
    nodes: Sequence[NodeInfo] = (),
    *,
    client: Any = None,
    args: VolumeBindingArgs | None = None,
) -> tuple[VolumeBinding, FakeHandle]:
    handle = FakeHandle(
        snapshot=Snapshot(list(nodes)),
        objects=objects(pvcs, pvs, CLASSES),
        client=client,
    )
    return VolumeBinding(args, handle), handle


@dataclass
class Case:
    name: str
    pod: Pod
    nodes: list[NodeInfo]
    pvcs: list[dict[str, Any]] = field(default_factory=list)
    pvs: list[dict[str, Any]] = field(default_factory=list)
    want_pre_filter: Status | None = None
    want_filter: list[Status | None] = field(default_factory=list)
    want_scores: list[int] = field(default_factory=list)


CASES = [
    Case("pod has not pvcs", pod_with("pod-a"), [node_info("node-a")], want_filter=[None], want_scores=[0]),
    Case(
        "all bound",
        pod_with_claims("pvc-a"),
        [node_info("node-a")],
        pvcs=[pvc("pvc-a", "wait-sc", bound_pv="pv-a")],
        pvs=[pv("pv-a", "wait-sc")],
        want_filter=[None],
        want_scores=[0],
    ),
    Case(
        "PVC does not exist",
        pod_with_claims("pvc-a"),
        [node_info("node-a")],
        want_pre_filter=Status.unresolvable('persistentvolumeclaim "pvc-a" not found'),
    ),
    Case(
        "Part of PVCs do not exist",
        pod_with_claims("pvc-a", "pvc-b"),
        [node_info("node-a")],
        pvcs=[pvc("pvc-a", "wait-sc", bound_pv="pv-a")],
        want_pre_filter=Status.unresolvable('persistentvolumeclaim "pvc-b" not found'),
    ),
    Case(
        "immediate claims not bound",
        pod_with_claims("pvc-a"),
        [node_info("node-a")],
        pvcs=[pvc("pvc-a", "immediate-sc")],
        want_pre_filter=Status.unresolvable("pod has unbound immediate PersistentVolumeClaims"),
    ),
    Case(
        "pre-bound claim (volumeName without bind-completed) counts as unbound immediate",
        pod_with_claims("pvc-a"),
        [node_info("node-a")],
        pvcs=[pvc("pvc-a", "wait-sc", bound_pv="pv-a", bind_completed=False)],
        pvs=[pv("pv-a", "wait-sc")],
        want_pre_filter=Status.unresolvable("pod has unbound immediate PersistentVolumeClaims"),
    ),
    Case(
        "unbound claims no matches",
        pod_with_claims("pvc-a"),
        [node_info("node-a")],
        pvcs=[pvc("pvc-a", "wait-sc")],
        want_filter=[Status.unresolvable(BIND_CONFLICT)],
        want_scores=[0],
    ),
    Case(
        "bound and unbound unsatisfied",
        pod_with_claims("pvc-a", "pvc-b"),
        [node_info("node-a", {"foo": "barbar"})],
        pvcs=[pvc("pvc-a", "wait-sc", bound_pv="pv-a"), pvc("pvc-b", "wait-sc")],
        pvs=[pv("pv-a", "wait-sc", node_affinity={"foo": ["bar"]})],
        want_filter=[Status.unresolvable(NODE_CONFLICT, BIND_CONFLICT)],
        want_scores=[0],
    ),
    Case(
        "pv not found",
        pod_with_claims("pvc-a"),
        [node_info("node-a")],
        pvcs=[pvc("pvc-a", "wait-sc", bound_pv="pv-a")],
        want_filter=[Status.unresolvable(PV_NOT_EXIST)],
        want_scores=[0],
    ),
    Case(
        "pv not found claim lost",
        pod_with_claims("pvc-a"),
        [node_info("node-a")],
        pvcs=[pvc("pvc-a", "wait-sc", bound_pv="pv-a", phase="Lost")],
        want_pre_filter=Status.unresolvable(
            'persistentvolumeclaim "pvc-a" bound to non-existent persistentvolume "pv-a"'
        ),
    ),
    Case(
        "pvc being deleted",
        pod_with_claims("pvc-a"),
        [node_info("node-a")],
        pvcs=[pvc("pvc-a", "wait-sc", bound_pv="pv-a", deleting=True)],
        want_pre_filter=Status.unresolvable('persistentvolumeclaim "pvc-a" is being deleted'),
    ),
    Case(
        "local volumes with close capacity are preferred",
        pod_with_claims("pvc-a"),
        [node_info("node-a"), node_info("node-b"), node_info("node-c")],
        pvcs=[pvc("pvc-a", "wait-sc", request="50Gi")],
        pvs=[
            pv("pv-a-0", "wait-sc", capacity="200Gi", node_affinity={HOST: ["node-a"]}),
            pv("pv-a-1", "wait-sc", capacity="200Gi", node_affinity={HOST: ["node-a"]}),
            pv("pv-b-0", "wait-sc", capacity="100Gi", node_affinity={HOST: ["node-b"]}),
            pv("pv-b-1", "wait-sc", capacity="100Gi", node_affinity={HOST: ["node-b"]}),
        ],
        want_filter=[None, None, Status.unresolvable(BIND_CONFLICT)],
        want_scores=[75, 50, 0],
    ),
    Case(
        "local volumes with close capacity are preferred (multiple pvcs)",
        pod_with_claims("pvc-0", "pvc-1"),
        [node_info("node-a"), node_info("node-b"), node_info("node-c")],
        pvcs=[pvc("pvc-0", "wait-sc", request="50Gi"), pvc("pvc-1", "wait-hdd-sc", request="100Gi")],
        pvs=[
            pv("pv-a-0", "wait-sc", capacity="200Gi", node_affinity={HOST: ["node-a"]}),
            pv("pv-a-1", "wait-sc", capacity="200Gi", node_affinity={HOST: ["node-a"]}),
            pv("pv-a-2", "wait-hdd-sc", capacity="200Gi", node_affinity={HOST: ["node-a"]}),
            pv("pv-a-3", "wait-hdd-sc", capacity="200Gi", node_affinity={HOST: ["node-a"]}),
            pv("pv-b-0", "wait-sc", capacity="100Gi", node_affinity={HOST: ["node-b"]}),
            pv("pv-b-1", "wait-sc", capacity="100Gi", node_affinity={HOST: ["node-b"]}),
            pv("pv-b-2", "wait-hdd-sc", capacity="100Gi", node_affinity={HOST: ["node-b"]}),
            pv("pv-b-3", "wait-hdd-sc", capacity="100Gi", node_affinity={HOST: ["node-b"]}),
        ],
        want_filter=[None, None, Status.unresolvable(BIND_CONFLICT)],
        want_scores=[63, 25, 0],
    ),
    Case(
        "zonal volumes with close capacity are preferred",
        pod_with_claims("pvc-a"),
        [
            node_info(
                f"zone-{z}-node-{n}",
                {"topology.kubernetes.io/region": f"region-{z}", "topology.kubernetes.io/zone": f"zone-{z}"},
            )
            for z in "abc"
            for n in "ab"
        ],
        pvcs=[pvc("pvc-a", "wait-sc", request="50Gi")],
        pvs=[
            pv(
                f"pv-{z}-{i}",
                "wait-sc",
                capacity=cap,
                node_affinity={
                    "topology.kubernetes.io/region": [f"region-{z}"],
                    "topology.kubernetes.io/zone": [f"zone-{z}"],
                },
            )
            for z, cap in (("a", "200Gi"), ("b", "100Gi"))
            for i in range(2)
        ],
        want_filter=[
            None,
            None,
            None,
            None,
            Status.unresolvable(BIND_CONFLICT),
            Status.unresolvable(BIND_CONFLICT),
        ],
        want_scores=[75, 75, 50, 50, 0, 0],
    ),
    Case(
        "WaitForFirstConsumer claim left for dynamic provisioning",
        pod_with_claims("pvc-a"),
        [node_info("node-a")],
        pvcs=[pvc("pvc-a", "dyn-sc", request="1Gi")],
        want_filter=[None],
        want_scores=[0],
    ),
    Case(
        "dynamic provisioning restricted by allowedTopologies",
        pod_with_claims("pvc-a"),
        [
            node_info("node-a", {"topology.kubernetes.io/zone": "zone-a"}),
            node_info("node-b", {"topology.kubernetes.io/zone": "zone-b"}),
        ],
        pvcs=[pvc("pvc-a", "zoned-sc")],
        want_filter=[None, Status.unresolvable(BIND_CONFLICT)],
        want_scores=[0, 0],
    ),
    Case(
        "claim already selected for another node takes the fast path",
        pod_with_claims("pvc-a"),
        [node_info("node-a"), node_info("node-b")],
        pvcs=[pvc("pvc-a", "dyn-sc", annotations={"volume.kubernetes.io/selected-node": "node-b"})],
        want_filter=[Status.unresolvable(BIND_CONFLICT), None],
        want_scores=[0, 0],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_volume_binding(case: Case) -> None:
    plugin, _ = _plugin(case.pvcs, case.pvs, case.nodes)
    state = CycleState()
    _, status = plugin.pre_filter(state, case.pod, case.nodes)
    if case.want_pre_filter is not None:
        assert status == case.want_pre_filter
        assert status is not None and status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        return
    if not case.pod.volumes:
        assert status is not None and status.code == Code.SKIP
    else:
        assert status is None
    got = [plugin.filter(state, case.pod, n) for n in case.nodes]
    assert got == case.want_filter
    for s in got:
        assert s is None or s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    # StorageCapacityScoring (on in 1.37): PreScore never skips once PreFilter wrote its state.
    assert plugin.pre_score(state, case.pod, case.nodes) is None
    scores = [plugin.score(state, case.pod, n)[0] for n in case.nodes]
    assert scores == case.want_scores
    # The vector path answers only when every score is 0 (no node with volume decisions).
    vector = plugin.score_vector(state, case.pod, Snapshot(list(case.nodes)), np.arange(len(case.nodes)))
    if vector is not None:
        assert vector.tolist() == scores
    if not case.pod.volumes:
        assert vector is not None


def _filter_all(plugin: VolumeBinding, pod: Pod, nodes: Sequence[NodeInfo]) -> tuple[CycleState, list[Any]]:
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, nodes)
    assert status is None
    return state, [plugin.filter(state, pod, n) for n in nodes]


def test_smallest_fitting_pv_is_chosen() -> None:
    claim = pvc("pvc-a", "wait-sc", request="5Gi")
    pvs = [
        pv("too-small", "wait-sc", capacity="1Gi"),
        pv("big", "wait-sc", capacity="100Gi"),
        pv("just-right", "wait-sc", capacity="10Gi"),
        pv("bigger", "wait-sc", capacity="20Gi"),
        pv("other-class", "wait-hdd-sc", capacity="5Gi"),
        pv("released", "wait-sc", capacity="5Gi", phase="Released"),
        pv("rox-only", "wait-sc", capacity="5Gi", access_modes=["ReadOnlyMany"]),
        pv("elsewhere", "wait-sc", capacity="5Gi", node_affinity={HOST: ["node-b"]}),
        pv("taken", "wait-sc", capacity="5Gi", claim_ref={"namespace": "default", "name": "other"}),
    ]
    nodes = [node_info("node-a")]
    plugin, _ = _plugin([claim], pvs, nodes)
    state, statuses = _filter_all(plugin, pod_with_claims("pvc-a"), nodes)
    assert statuses == [None]
    decisions = state.read("VolumeBinding").pod_volumes_by_node["node-a"]
    assert [v.metadata.name for _, v in decisions.static_bindings] == ["just-right"]
    assert decisions.dynamic_provisions == []


def test_pv_pre_bound_to_claim_wins_over_smaller_pv() -> None:
    claim = pvc("pvc-a", "wait-sc", request="1Gi")
    pvs = [
        pv("small", "wait-sc", capacity="1Gi"),
        pv(
            "mine",
            "wait-sc",
            capacity="50Gi",
            phase="Pending",
            claim_ref={"namespace": "default", "name": "pvc-a"},
        ),
    ]
    nodes = [node_info("node-a")]
    plugin, _ = _plugin([claim], pvs, nodes)
    state, statuses = _filter_all(plugin, pod_with_claims("pvc-a"), nodes)
    assert statuses == [None]
    decisions = state.read("VolumeBinding").pod_volumes_by_node["node-a"]
    assert [v.metadata.name for _, v in decisions.static_bindings] == ["mine"]


def test_claim_selector_filters_pvs() -> None:
    claim = pvc("pvc-a", "wait-sc", selector={"matchLabels": {"tier": "gold"}})
    pvs = [pv("plain", "wait-sc"), pv("gold", "wait-sc", labels={"tier": "gold"})]
    nodes = [node_info("node-a")]
    plugin, _ = _plugin([claim], pvs, nodes)
    state, statuses = _filter_all(plugin, pod_with_claims("pvc-a"), nodes)
    assert statuses == [None]
    decisions = state.read("VolumeBinding").pod_volumes_by_node["node-a"]
    assert [v.metadata.name for _, v in decisions.static_bindings] == ["gold"]


def test_two_claims_do_not_share_one_pv() -> None:
    claims = [pvc("pvc-a", "wait-sc", request="1Gi"), pvc("pvc-b", "wait-sc", request="1Gi")]
    nodes = [node_info("node-a")]
    plugin, _ = _plugin(claims, [pv("only", "wait-sc", capacity="1Gi")], nodes)
    _, statuses = _filter_all(plugin, pod_with_claims("pvc-a", "pvc-b"), nodes)
    assert statuses == [Status.unresolvable(BIND_CONFLICT)]


def test_unbound_claim_falls_back_to_provisioning_when_no_pv_fits() -> None:
    claim = pvc("pvc-a", "dyn-sc", request="10Gi")
    nodes = [node_info("node-a")]
    plugin, _ = _plugin([claim], [pv("small", "dyn-sc", capacity="1Gi")], nodes)
    state, statuses = _filter_all(plugin, pod_with_claims("pvc-a"), nodes)
    assert statuses == [None]
    decisions = state.read("VolumeBinding").pod_volumes_by_node["node-a"]
    assert decisions.static_bindings == []
    assert [c.metadata.name for c in decisions.dynamic_provisions] == ["pvc-a"]


def test_storage_class_without_binding_mode_is_an_error() -> None:
    nodes = [node_info("node-a")]
    plugin, handle = _plugin([pvc("pvc-a", "nomode")], [], nodes)
    handle.objects["StorageClass"]["nomode"] = view(sc("nomode", None))
    _, status = plugin.pre_filter(CycleState(), pod_with_claims("pvc-a"), nodes)
    assert status is not None and status.code == Code.ERROR
    assert status.message == 'VolumeBindingMode not set for StorageClass "nomode"'


def test_ephemeral_volume_waits_for_its_claim() -> None:
    pod = pod_with(
        "web", {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}, uid="pod-uid-1"
    )
    plugin, handle = _plugin([], [], [node_info("node-a")])
    _, status = plugin.pre_filter(CycleState(), pod, [])
    assert status == Status.unresolvable(
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "web-scratch"'
    )
    handle.objects["PersistentVolumeClaim"]["default/web-scratch"] = view(pvc("web-scratch", "dyn-sc"))
    _, status = plugin.pre_filter(CycleState(), pod, [])
    assert status == Status.unresolvable(
        "PVC default/web-scratch was not created for pod default/web (pod is not owner)"
    )
    handle.objects["PersistentVolumeClaim"]["default/web-scratch"] = view(
        pvc("web-scratch", "dyn-sc", owner_uid="pod-uid-1")
    )
    _, status = plugin.pre_filter(CycleState(), pod, [])
    assert status is None


def test_custom_shape() -> None:
    # Prefer fuller volumes: 0 at 0% utilization, 10 at 100% (the opposite of the default).
    args = adapter(VolumeBindingArgs).validate_python(
        {
            "bindTimeoutSeconds": 30,
            "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}],
        }
    )
    nodes = [node_info("node-a")]
    plugin, _ = _plugin(
        [pvc("pvc-a", "wait-sc", request="25Gi")], [pv("p", "wait-sc", capacity="100Gi")], nodes, args=args
    )
    state, _ = _filter_all(plugin, pod_with_claims("pvc-a"), nodes)
    assert plugin.pre_score(state, pod_with_claims("pvc-a"), nodes) is None
    assert plugin.score(state, pod_with_claims("pvc-a"), nodes[0]) == (25, None)
    assert plugin.bind_timeout == 30


CAPACITY_SC = sc(
    "wait-sc-with-storage-capacity", "WaitForFirstConsumer", provisioner="driver-with-storage-capacity"
)
NODE_LABEL = "kubernetes.io/hostname"


def _capacity(name: str, node: str, capacity: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {"name": name, "namespace": "default"},
        "storageClassName": CAPACITY_SC["metadata"]["name"],
        "nodeTopology": {"matchLabels": {NODE_LABEL: node}},
        "capacity": capacity,
    }


def _capacity_plugin(
    claims: Sequence[dict[str, Any]],
    pvs: Sequence[dict[str, Any]],
    capacities: dict[str, str],
    args: VolumeBindingArgs | None = None,
) -> tuple[VolumeBinding, list[NodeInfo]]:
    nodes = [node_info(n) for n in capacities]
    plugin, handle = _plugin(claims, pvs, nodes, args=args)
    handle.objects["StorageClass"].update(store(CAPACITY_SC))
    handle.objects["CSIDriver"] = store(
        {
            "kind": "CSIDriver",
            "metadata": {"name": "driver-with-storage-capacity"},
            "spec": {"storageCapacity": True},
        }
    )
    handle.objects["CSIStorageCapacity"] = store(*(_capacity(n, n, c) for n, c in capacities.items()))
    return plugin, nodes


def _scores(plugin: VolumeBinding, pod: Pod, nodes: Sequence[NodeInfo]) -> list[int]:
    state, statuses = _filter_all(plugin, pod, nodes)
    assert statuses == [None] * len(nodes)
    assert plugin.pre_score(state, pod, nodes) is None
    return [plugin.score(state, pod, n)[0] for n in nodes]


CAPACITY_CLASS = CAPACITY_SC["metadata"]["name"]
THREE_NODES = {"node-a": "100Gi", "node-b": "50Gi", "node-c": "10Gi"}


def test_storage_capacity_score() -> None:
    """volume_binding_test.go "storage capacity score": dynamic provisioning by free capacity."""
    claim = pvc("pvc-dynamic", CAPACITY_CLASS, request="10Gi")
    plugin, nodes = _capacity_plugin([claim], [], THREE_NODES)
    assert _scores(plugin, pod_with_claims("pvc-dynamic"), nodes) == [90, 80, 0]


def test_storage_capacity_score_with_static_binds() -> None:
    """With a static binding, only static bindings are scored (50Gi of 100Gi: 50)."""
    claims = [
        pvc("pvc-dynamic", CAPACITY_CLASS, request="10Gi"),
        pvc("pvc-static", "wait-sc", request="50Gi"),
    ]
    pvs = [
        pv(f"pv-static-{n[-1]}", "wait-sc", capacity="100Gi", node_affinity={HOST: [n]}) for n in THREE_NODES
    ]
    plugin, nodes = _capacity_plugin(claims, pvs, THREE_NODES)
    assert _scores(plugin, pod_with_claims("pvc-dynamic", "pvc-static"), nodes) == [50, 50, 50]


def test_dynamic_provisioning_with_multiple_claims_of_one_class() -> None:
    claims = [
        pvc("pvc-dynamic-0", CAPACITY_CLASS, request="50Gi"),
        pvc("pvc-dynamic-1", CAPACITY_CLASS, request="50Gi"),
    ]
    plugin, nodes = _capacity_plugin(claims, [], {"node-a": "100Gi"})
    assert _scores(plugin, pod_with_claims("pvc-dynamic-0", "pvc-dynamic-1"), nodes) == [0]


@pytest.mark.parametrize(
    ("shape", "want"),
    [
        ([{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}], [10, 50, 100]),
        (None, [90, 50, 0]),
    ],
    ids=["prefer node with least allocatable", "prefer node with maximum allocatable"],
)
def test_storage_capacity_shapes(shape: list[dict[str, int]] | None, want: list[int]) -> None:
    args = adapter(VolumeBindingArgs).validate_python({"bindTimeoutSeconds": 300, "shape": shape})
    claim = pvc("pvc-dynamic", CAPACITY_CLASS, request="10Gi")
    plugin, nodes = _capacity_plugin(
        [claim], [], {"node-a": "100Gi", "node-b": "20Gi", "node-c": "10Gi"}, args
    )
    assert _scores(plugin, pod_with_claims("pvc-dynamic"), nodes) == want


def test_args_validation() -> None:
    with pytest.raises(ValueError):
        adapter(VolumeBindingArgs).validate_python({"bindTimeoutSeconds": -1})
    with pytest.raises(ValueError):
        adapter(VolumeBindingArgs).validate_python({"unknown": 1})
    with pytest.raises(ValueError, match="values must be sorted in increasing order"):
        adapter(VolumeBindingArgs).validate_python(
            {"shape": [{"utilization": 50, "score": 1}, {"utilization": 10, "score": 2}]}
        )
    with pytest.raises(ValueError) as err:
        adapter(VolumeBindingArgs).validate_python(
            {
                "shape": [
                    {"utilization": 10, "score": 11},
                    {"utilization": 10, "score": -1},
                    {"utilization": 101, "score": 0},
                ]
            }
        )
    assert str(err.value).count("shape[") == 4  # unsorted (first only), then every range error
    defaults = adapter(VolumeBindingArgs).validate_python({})
    assert defaults.bind_timeout_seconds == 600
    # v1 defaulting with StorageCapacityScoring on: 10 at 0% utilization, 0 at 100%.
    assert [(p.utilization, p.score) for p in defaults.shape] == [(0, 10), (100, 0)]
    emptied = adapter(VolumeBindingArgs).validate_python({"shape": []})
    assert [(p.utilization, p.score) for p in emptied.shape] == [
        (0, 10),
        (100, 0),
    ]


# --- Reserve / Unreserve: the assume cache ----------------------------------------------------


def test_reserved_pv_is_not_offered_to_the_next_pod_until_unreserved() -> None:
    claims = [pvc("pvc-a", "wait-sc"), pvc("pvc-b", "wait-sc")]
    nodes = [node_info("node-a")]
    plugin, _ = _plugin(claims, [pv("only", "wait-sc")], nodes)
    pod_a, pod_b = pod_with_claims("pvc-a", name="a"), pod_with_claims("pvc-b", name="b")
    state_a, statuses = _filter_all(plugin, pod_a, nodes)
    assert statuses == [None]
    assert plugin.reserve(state_a, pod_a, "node-a") is None
    assert state_a.read("VolumeBinding").all_bound is False
    # The PV now carries pvc-a's claimRef in the assume cache: pod b finds nothing.
    _, statuses = _filter_all(plugin, pod_b, nodes)
    assert statuses == [Status.unresolvable(BIND_CONFLICT)]
    plugin.unreserve(state_a, pod_a, "node-a")
    _, statuses = _filter_all(plugin, pod_b, nodes)
    assert statuses == [None]


def test_assumption_dropped_when_watch_delivers_a_newer_object() -> None:
    claims = [pvc("pvc-a", "wait-sc"), pvc("pvc-b", "wait-sc")]
    nodes = [node_info("node-a")]
    plugin, handle = _plugin(claims, [pv("only", "wait-sc")], nodes)
    pod_a, pod_b = pod_with_claims("pvc-a", name="a"), pod_with_claims("pvc-b", name="b")
    state_a, _ = _filter_all(plugin, pod_a, nodes)
    plugin.reserve(state_a, pod_a, "node-a")
    # The informer now shows the PV released again under a new resourceVersion.
    seen = handle.objects["PersistentVolume"]["only"]
    fresh = dataclasses.replace(seen, metadata=dataclasses.replace(seen.metadata, resource_version="999999"))
    handle.objects["PersistentVolume"]["only"] = fresh
    _, statuses = _filter_all(plugin, pod_b, nodes)
    assert statuses == [None]


def test_dynamic_provision_assumes_selected_node() -> None:
    claim = pvc("pvc-a", "dyn-sc")
    nodes = [node_info("node-a"), node_info("node-b")]
    plugin, _ = _plugin([claim], [], nodes)
    pod = pod_with_claims("pvc-a", name="a")
    state, statuses = _filter_all(plugin, pod, nodes)
    assert statuses == [None, None]
    plugin.reserve(state, pod, "node-b")
    # Another pod sharing the claim now sees it selected for node-b (fast path on node-a).
    other = pod_with_claims("pvc-a", name="b")
    _, statuses = _filter_all(plugin, other, nodes)
    assert statuses == [Status.unresolvable(BIND_CONFLICT), None]
    plugin.unreserve(state, pod, "node-b")
    _, statuses = _filter_all(plugin, other, nodes)
    assert statuses == [None, None]


def test_reserve_with_all_claims_bound_needs_no_prebind() -> None:
    nodes = [node_info("node-a")]
    client = FakeClient()
    plugin, _ = _plugin(
        [pvc("pvc-a", "wait-sc", bound_pv="pv-a")], [pv("pv-a", "wait-sc")], nodes, client=client
    )
    pod = pod_with_claims("pvc-a")
    state, _ = _filter_all(plugin, pod, nodes)
    assert plugin.reserve(state, pod, "node-a") is None
    assert state.read("VolumeBinding").all_bound is True


# --- PreBind ----------------------------------------------------------------------------------


@dataclass
class FakeClient:
    """Records bind_volumes calls; optionally plays the PV controller on the handle's objects."""

    handle: FakeHandle | None = None
    act_as_pv_controller: bool = True
    drop_selected_node: bool = False
    fail: bool = False
    calls: list[tuple[str, str, list[tuple[str, str]]]] = field(default_factory=list)

    async def bind_volumes(self, pod: Pod, claims: Sequence[tuple[str, str]]) -> None:
        self.calls.append((pod.key, pod.node_name, list(claims)))
        if self.fail:
            raise ApiError("apiserver unavailable", 503)
        if self.handle is None or not self.act_as_pv_controller:
            return
        objs = self.handle.objects
        for key, pv_name in claims:
            claim = objs["PersistentVolumeClaim"][key]
            meta = dataclasses.replace(claim.metadata, resource_version=claim.metadata.resource_version + "1")
            if self.drop_selected_node:
                meta = dataclasses.replace(meta, annotations={"other": "x"})
                objs["PersistentVolumeClaim"][key] = dataclasses.replace(claim, metadata=meta)
                continue
            name = pv_name or f"pvc-{meta.uid}"
            annotations = {**meta.annotations, "pv.kubernetes.io/bind-completed": "yes"}
            if not pv_name:
                annotations["volume.kubernetes.io/selected-node"] = pod.node_name
                objs["PersistentVolume"][name] = view(pv(name, "dyn-sc"))
            else:
                volume = objs["PersistentVolume"][pv_name]
                ns, _, claim_name = key.partition("/")
                objs["PersistentVolume"][pv_name] = dataclasses.replace(
                    volume,
                    claim_ref=ClaimRef(claim_name, ns, meta.uid),
                    metadata=dataclasses.replace(
                        volume.metadata, resource_version=volume.metadata.resource_version + "1"
                    ),
                )
            objs["PersistentVolumeClaim"][key] = dataclasses.replace(
                claim, metadata=dataclasses.replace(meta, annotations=annotations), volume_name=name
            )


def _scheduled(
    pvcs: Sequence[dict[str, Any]], pvs: Sequence[dict[str, Any]], client: FakeClient, *claims: str
) -> tuple[VolumeBinding, CycleState, Pod]:
    nodes = [node_info("node-a")]
    plugin, handle = _plugin(pvcs, pvs, nodes, client=client)
    client.handle = handle
    plugin.poll_interval = 0.001
    pod = pod_with_claims(*claims)
    state, statuses = _filter_all(plugin, pod, nodes)
    assert statuses == [None]
    assert plugin.reserve(state, pod, "node-a") is None
    return plugin, state, pod


async def test_pre_bind_static_binding_calls_bind_volumes_and_waits_for_bound() -> None:
    client = FakeClient()
    plugin, state, pod = _scheduled([pvc("pvc-a", "wait-sc")], [pv("pv-1", "wait-sc")], client, "pvc-a")
    assert await plugin.pre_bind(state, pod, "node-a") is None
    assert client.calls == [("default/pod-a", "node-a", [("default/pvc-a", "pv-1")])]


async def test_pre_bind_dynamic_provisioning_passes_empty_pv_name() -> None:
    client = FakeClient()
    plugin, state, pod = _scheduled(
        [pvc("pvc-a", "dyn-sc"), pvc("pvc-b", "wait-sc")], [pv("pv-1", "wait-sc")], client, "pvc-a", "pvc-b"
    )
    assert await plugin.pre_bind(state, pod, "node-a") is None
    # Static bindings first, then claims to provision.
    assert client.calls == [("default/pod-a", "node-a", [("default/pvc-b", "pv-1"), ("default/pvc-a", "")])]


async def test_pre_bind_skips_when_all_bound() -> None:
    client = FakeClient()
    nodes = [node_info("node-a")]
    plugin, _ = _plugin(
        [pvc("pvc-a", "wait-sc", bound_pv="pv-a")], [pv("pv-a", "wait-sc")], nodes, client=client
    )
    pod = pod_with_claims("pvc-a")
    state, _ = _filter_all(plugin, pod, nodes)
    plugin.reserve(state, pod, "node-a")
    assert await plugin.pre_bind(state, pod, "node-a") is None
    assert client.calls == []


async def test_pre_bind_client_error_is_an_error_status() -> None:
    client = FakeClient(fail=True)
    plugin, state, pod = _scheduled([pvc("pvc-a", "wait-sc")], [pv("pv-1", "wait-sc")], client, "pvc-a")
    status = await plugin.pre_bind(state, pod, "node-a")
    assert status is not None and status.code == Code.ERROR
    assert "apiserver unavailable" in status.message


async def test_pre_bind_provisioning_failure_is_reported() -> None:
    client = FakeClient(drop_selected_node=True)
    plugin, state, pod = _scheduled([pvc("pvc-a", "dyn-sc")], [], client, "pvc-a")
    status = await plugin.pre_bind(state, pod, "node-a")
    assert status is not None and status.code == Code.ERROR
    assert status.message == 'binding volumes: provisioning failed for PVC "pvc-a"'


async def test_pre_bind_times_out_when_nothing_binds() -> None:
    client = FakeClient(act_as_pv_controller=False)
    plugin, state, pod = _scheduled([pvc("pvc-a", "dyn-sc")], [], client, "pvc-a")
    plugin.bind_timeout = 0.01
    status = await plugin.pre_bind(state, pod, "node-a")
    assert status is not None and status.code == Code.ERROR
    assert status.message == "binding volumes: context deadline exceeded"
    assert len(client.calls) == 1


async def test_pre_bind_without_filter_decision_for_node_is_error() -> None:
    client = FakeClient()
    plugin, state, pod = _scheduled([pvc("pvc-a", "dyn-sc")], [], client, "pvc-a")
    status = await plugin.pre_bind(state, pod, "node-z")
    assert status is not None and status.code == Code.ERROR
    assert status.message == 'no pod volume found for node "node-z"'


# --- PreBindPreFlight (NominatedNodeNameForExpectation) ---------------------------------------


def test_pre_bind_pre_flight_skips_a_pod_without_claims() -> None:
    plugin, _ = _plugin(nodes=[node_info("node-a")])
    pod, state = pod_with("pod-a"), CycleState()
    assert plugin.pre_filter(state, pod, []) == (None, Status(Code.SKIP))
    assert plugin.reserve(state, pod, "node-a") is None
    assert plugin.pre_bind_pre_flight(state, pod, "node-a") == Status(Code.SKIP)


def test_pre_bind_pre_flight_skips_when_every_claim_is_bound() -> None:
    claim_ref = {"namespace": "default", "name": "pvc-a", "uid": "pvc-a-uid"}
    plugin, state, pod = _scheduled(
        [pvc("pvc-a", "wait-sc", bound_pv="pv-a")],
        [pv("pv-a", "wait-sc", claim_ref=claim_ref)],
        FakeClient(),
        "pvc-a",
    )
    assert plugin.pre_bind_pre_flight(state, pod, "node-a") == Status(Code.SKIP)


@pytest.mark.parametrize(
    ("pvcs", "pvs"),
    [([pvc("pvc-a", "wait-sc")], [pv("pv-1", "wait-sc")]), ([pvc("pvc-a", "dyn-sc")], [])],
    ids=["static-binding", "dynamic-provisioning"],
)
def test_pre_bind_pre_flight_succeeds_when_the_node_has_volume_work(
    pvcs: list[dict[str, Any]], pvs: list[dict[str, Any]]
) -> None:
    client = FakeClient()
    plugin, state, pod = _scheduled(pvcs, pvs, client, "pvc-a")
    assert plugin.pre_bind_pre_flight(state, pod, "node-a") is None
    assert client.calls == []  # a pre-flight only looks


def test_pre_bind_pre_flight_errors_for_a_node_without_volume_decisions() -> None:
    plugin, state, pod = _scheduled([pvc("pvc-a", "dyn-sc")], [], FakeClient(), "pvc-a")
    status = plugin.pre_bind_pre_flight(state, pod, "node-z")
    assert status is not None and status.code == Code.ERROR
    assert status.message == 'no pod volume found for node "node-z"'


def test_pre_bind_pre_flight_without_state_is_not_found() -> None:
    plugin, _ = _plugin()
    status = plugin.pre_bind_pre_flight(CycleState(), pod_with_claims("pvc-a"), "node-a")
    assert status is not None and status.code == Code.ERROR and status.message == "not found"


def test_framework_pre_flight_wraps_the_volume_binding_error() -> None:
    from kopf_scheduler.framework.profiles import load_profile
    from kopf_scheduler.framework.runtime import Framework

    # The default profile's PreBind plugins: VolumeBinding first, then DynamicResources.
    fw = Framework(load_profile({"schedulerName": "s"}), objects={})
    assert [p.name for p in fw.pre_bind_plugins] == ["VolumeBinding", "DynamicResources"]
    status = fw.run_pre_bind_pre_flights(CycleState(), pod_with_claims("pvc-a"), "node-a")
    assert status is not None and status.code == Code.ERROR
    assert status.message == 'running PreBindPreFlight "VolumeBinding": not found'


# --- events -----------------------------------------------------------------------------------


def test_events_and_hints() -> None:
    plugin, _ = _plugin()
    events = {(e.event.resource, e.event.action): e.hint for e in plugin.events_to_register()}
    assert (EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL) in events
    assert (EventResource.PV, ActionType.ADD | ActionType.UPDATE) in events
    pod = pod_with_claims("pvc-a", namespace="ns1")
    pvc_hint = events[(EventResource.PVC, ActionType.ADD | ActionType.UPDATE)]
    assert pvc_hint is not None
    assert pvc_hint(pod, None, view(pvc("pvc-a", namespace="ns1"))) == QueueingHint.QUEUE
    assert pvc_hint(pod, None, view(pvc("pvc-a", namespace="ns2"))) == QueueingHint.QUEUE_SKIP
    assert pvc_hint(pod, None, view(pvc("pvc-b", namespace="ns1"))) == QueueingHint.QUEUE_SKIP
    sc_hint = events[(EventResource.STORAGE_CLASS, ActionType.ADD | ActionType.UPDATE)]
    assert sc_hint is not None
    assert sc_hint(pod, None, view(WAIT)) == QueueingHint.QUEUE
    assert sc_hint(pod, view(WAIT), view(WAIT)) == QueueingHint.QUEUE_SKIP
    zoned = view({**DYNAMIC, "allowedTopologies": ZONED["allowedTopologies"]})
    assert sc_hint(pod, view(DYNAMIC), zoned) == QueueingHint.QUEUE
    csi_hint = events[(EventResource.CSI_NODE, ActionType.ADD | ActionType.UPDATE)]
    assert csi_hint is not None
    old = parse_csi_node({"metadata": {"name": "n", "annotations": {}}})
    migrated = {
        "metadata": {"name": "n", "annotations": {"storage.alpha.kubernetes.io/migrated-plugins": "x"}}
    }
    new = parse_csi_node(migrated)
    assert csi_hint(pod, None, new) == QueueingHint.QUEUE
    assert csi_hint(pod, old, new) == QueueingHint.QUEUE
    assert csi_hint(pod, new, parse_csi_node(migrated)) == QueueingHint.QUEUE_SKIP


def test_non_claim_volumes_are_ignored() -> None:
    pod = pod_with("p", {"name": "cfg", "configMap": {"name": "c"}}, claim_volume("pvc-a"))
    nodes = [node_info("node-a")]
    plugin, _ = _plugin([pvc("pvc-a", "wait-sc", bound_pv="pv-a")], [pv("pv-a", "wait-sc")], nodes)
    _, statuses = _filter_all(plugin, pod, nodes)
    assert statuses == [None]


def _hints(plugin: VolumeBinding) -> dict[tuple[EventResource, ActionType], Any]:
    return {(e.event.resource, e.event.action): e.hint for e in plugin.events_to_register()}


def test_storage_capacity_hint() -> None:
    """isSchedulableAfterCSIStorageCapacityChange: new objects, or a volume limit that grew."""
    hint = _hints(_plugin()[0])[(EventResource.CSI_STORAGE_CAPACITY, ActionType.ADD | ActionType.UPDATE)]
    pod = pod_with_claims("pvc-a")

    def cap(capacity: str | None = None, maximum: str | None = None) -> CSIStorageCapacity:
        out: dict[str, Any] = {"metadata": {"name": "c", "namespace": "default"}, "storageClassName": "x"}
        if capacity is not None:
            out["capacity"] = capacity
        if maximum is not None:
            out["maximumVolumeSize"] = maximum
        return parse_csi_storage_capacity(out)

    assert hint(pod, None, cap("10Gi")) == QueueingHint.QUEUE
    assert hint(pod, cap(), cap("10Gi")) == QueueingHint.QUEUE  # capacity set
    assert hint(pod, cap("10Gi"), cap("10Gi", "20Gi")) == QueueingHint.QUEUE  # maximumVolumeSize set
    assert hint(pod, cap("10Gi"), cap("20Gi")) == QueueingHint.QUEUE
    assert hint(pod, cap("20Gi", "10Gi"), cap("20Gi")) == QueueingHint.QUEUE  # maximumVolumeSize unset
    assert hint(pod, cap("10Gi"), cap("10Gi")) == QueueingHint.QUEUE_SKIP
    assert hint(pod, cap("10Gi", "20Gi"), cap("20Gi")) == QueueingHint.QUEUE_SKIP  # equal limits
    assert hint(pod, cap("20Gi"), cap("10Gi")) == QueueingHint.QUEUE_SKIP
    assert hint(pod, cap("10Gi", "20Gi"), cap("10Gi", "10Gi")) == QueueingHint.QUEUE_SKIP


def test_csi_driver_hint() -> None:
    """isSchedulableAfterCSIDriverChange: a driver of an inline CSI volume stops tracking capacity."""
    hint = _hints(_plugin()[0])[(EventResource.CSI_DRIVER, ActionType.UPDATE)]

    def driver(name: str, capacity: bool | None) -> CSIDriver:
        body: dict[str, Any] = {} if capacity is None else {"storageCapacity": capacity}
        return parse_csi_driver({"metadata": {"name": name}, "spec": body})

    pod = pod_with("p", {"name": "v", "csi": {"driver": "test-driver"}})
    assert hint(pod, driver("test-driver", True), driver("test-driver", None)) == QueueingHint.QUEUE
    assert hint(pod, driver("test-driver", True), driver("test-driver", False)) == QueueingHint.QUEUE
    assert hint(pod, driver("test-driver", None), driver("test-driver", True)) == QueueingHint.QUEUE_SKIP
    assert hint(pod, driver("test-driver", False), driver("test-driver", True)) == QueueingHint.QUEUE_SKIP
    assert hint(pod, driver("other", True), driver("other", False)) == QueueingHint.QUEUE_SKIP
    assert hint(pod_with("p"), driver("test-driver", True), driver("test-driver", False)) == (
        QueueingHint.QUEUE_SKIP
    )
