"""Workloads shaped like scheduler_perf's ``config/performance-config.yaml``, scaled to a 2-core box.

Each workload is: nodes, pods already running on them (created bound, ``spec.nodeName`` set, so
setting up does not depend on the scheduler under test), optional pods that never fit (created
right before the measured ones and not waited for, like scheduler_perf's ``skipWaitToCompletion``),
and the measured pods. Pod and node shapes follow scheduler_perf's templates: 4 CPU / 32Gi / 110-pod
nodes; 100m / 500Mi pods; 900m low-priority victims and 3000m high-priority preemptors; 9-CPU pods
that fit nowhere.

``--scale perf`` is different: scheduler_perf's own performance-labelled cases, by their own names and
at their own sizes (``test/integration/scheduler_perf/*/performance-config.yaml`` of the reference
release), with the SchedulingThroughput threshold its CI holds them to. A ``perf_factor`` below 1
shrinks every count for a smoke test of the code path only: its figures are not those cases'.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NAMESPACE", "SCALES", "TRACK_LABEL", "Workload", "workloads"]

NAMESPACE = "bench"
TRACK_LABEL = "kopf-scheduler.bench/track"  # the warm-up and measured pods: what the tracker watches
ZONE = "topology.kubernetes.io/zone"
SCALES = ("tiny", "small", "full", "perf")

Obj = dict[str, Any]


def node(name: str, labels: dict[str, str] | None = None) -> Obj:
    """scheduler_perf's node-default: 4 CPU, 32Gi, 110 pods, Ready."""
    capacity = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True"}],
            "phase": "Running",
        },
    }


def pod(
    name: str,
    *,
    cpu: str = "100m",
    memory: str = "500Mi",
    limits: bool = True,
    labels: dict[str, str] | None = None,
    priority_class: str | None = None,
    grace_zero: bool = False,
    **spec: Any,
) -> Obj:
    """A pause pod like scheduler_perf's templates; extra ``spec`` keys are merged in."""
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
    if limits:
        resources["limits"] = {"cpu": cpu, "memory": memory}
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": dict(labels or {})},
        "spec": {
            "containers": [
                {
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.10",
                    "ports": [{"containerPort": 80}],
                    "resources": resources,
                }
            ],
            **spec,
        },
    }
    if priority_class:
        body["spec"]["priorityClassName"] = priority_class
    if grace_zero:
        # Without a kubelet a deleted bound pod would wait for it forever; 0 deletes at once
        # (scheduler_perf's low-priority template does the same, for the same reason).
        body["spec"]["terminationGracePeriodSeconds"] = 0
    return body


PodFactory = Callable[[str], Obj]


@dataclass
class Workload:
    """One measured scenario; pods are made by factories so names and schedulerName come late."""

    name: str
    nodes: int
    init_pods: int
    measure_pods: int
    unschedulable_pods: int = 0
    node_labels: Callable[[int], dict[str, str]] = lambda i: {}
    init_pod: PodFactory = lambda name: pod(name)
    measure_pod: PodFactory = lambda name: pod(name)
    unschedulable_pod: PodFactory = lambda name: pod(name, cpu="9", limits=False)
    init_per_node: int = 0  # >0: exactly this many init pods per node (preemption); else round-robin
    priority_classes: dict[str, int] = field(default_factory=dict)
    timeout: float = 240.0  # seconds to wait for the measured pods
    note: str = ""
    # Other objects the cluster starts with (DRA: DeviceClass, ResourceSlices, ResourceClaims),
    # created after the nodes, in order.
    cluster_objects: Callable[[], list[Obj]] = lambda: []
    # pluginConfig for both schedulers' profile (ours: a SchedulerProfile; the reference: its config).
    plugin_config: tuple[Obj, ...] = ()
    # >0: measured pods join PodGroups of this many (gang policy, minCount the same), created with
    # the cluster; the plane serves them (GenericWorkload), the reference runs with that gate on
    # and ours with GangScheduling in its profile.
    gang_size: int = 0
    # scheduler_perf's SchedulingThroughput threshold for the case (pods/s on its CI machines), if any.
    threshold: float | None = None
    # Where the case comes from (perf scale: scheduler_perf's config file and case name).
    source: str = ""
    # kube-controller-manager beside the apiserver: its resourceclaim controller makes each pod's
    # claim from a ResourceClaimTemplate, as scheduler_perf's own claim controller does.
    controllers: bool = False
    # Objects created after ``cluster_objects`` whose ``status`` is then written (ResourceClaims
    # allocated before the scheduler starts, like scheduler_perf's allocResourceClaims).
    allocated_objects: Callable[[], list[Obj]] = lambda: []

    @property
    def workloads_api(self) -> bool:
        return self.gang_size > 0

    def node_objects(self) -> list[Obj]:
        return [node(f"node-{i:05d}", self.node_labels(i)) for i in range(self.nodes)]

    def init_objects(self) -> list[Obj]:
        """Pods already running: bound to nodes round-robin (or ``init_per_node`` each) at creation."""
        out = []
        for i in range(self.init_pods):
            body = self.init_pod(f"init-{i:06d}")
            index = i // self.init_per_node if self.init_per_node else i % self.nodes
            body["spec"]["nodeName"] = f"node-{index % self.nodes:05d}"
            out.append(body)
        return out

    def unschedulable_objects(self, scheduler_name: str) -> list[Obj]:
        out = []
        for i in range(self.unschedulable_pods):
            body = self.unschedulable_pod(f"unsched-{i:06d}")
            body["spec"]["schedulerName"] = scheduler_name
            out.append(body)
        return out

    def measure_objects(self, scheduler_name: str, prefix: str = "pod") -> list[Obj]:
        out = []
        for i in range(self.measure_pods):
            body = self.measure_pod(f"{prefix}-{i:06d}")
            body["metadata"]["labels"][TRACK_LABEL] = "1"
            body["spec"]["schedulerName"] = scheduler_name
            if self.gang_size:
                body["spec"]["schedulingGroup"] = {"podGroupName": gang_name(i // self.gang_size)}
            out.append(body)
        return out

    def warmup_object(self, scheduler_name: str) -> Obj:
        """One plain pod pending before the scheduler starts: its bind says the scheduler is live."""
        body = pod("warmup", cpu="10m", memory="16Mi", labels={TRACK_LABEL: "1"})
        body["spec"]["schedulerName"] = scheduler_name
        return body


def gang_name(index: int) -> str:
    return f"gang-{index:05d}"


def _pod_groups(groups: int, size: int) -> list[Obj]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": gang_name(g), "namespace": NAMESPACE},
            "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
        }
        for g in range(groups)
    ]


# scheduler_perf's batching/scheduler-config-no-topology.yaml: without system-default spreading
# (every pod's placement would depend on its predecessors') pods can be signed and batched.
NO_TOPOLOGY: Obj = {"name": "PodTopologySpread", "args": {"defaultingType": "List", "defaultConstraints": []}}


def _anti_affinity_pod(name: str) -> Obj:
    term = {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": "kubernetes.io/hostname"}
    return pod(
        name,
        labels={"color": "green"},
        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
    )


def _spread_pod(name: str) -> Obj:
    constraint = {
        "maxSkew": 5,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"color": "blue"}},
    }
    return pod(name, labels={"color": "blue"}, topologySpreadConstraints=[constraint])


def _node_affinity_pod(name: str) -> Obj:
    term = {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone1", "zone2"]}]}
    return pod(
        name,
        affinity={
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        },
    )


DRA_DRIVER = "test-driver.cdi.k8s.io"
DRA_CLASS = "test-class"
DRA_PODS_PER_CLAIM = 5  # scheduler_perf's pod-with-claim-ref: five pods share one claim


def _dra_slice(index: int, node_name: str, devices: int) -> Obj:
    """scheduler_perf's resourceslice-basic-devices: one pool per node, GPU-like attributes."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"resourceslice-{index}"},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node_name,
            "pool": {"name": f"resourceslice-{index}", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"basic-device-{d}",
                    "attributes": {
                        "driver": {"string": "xe"},
                        "driverVersion": {"version": "1.2.3"},
                        "resource.k8s.io/pciRoot": {"string": str(d % 2)},
                        "family": {"string": "Arc Pro B-Series"},
                        "health": {"string": "Healthy"},
                        "model": {"string": "B60"},
                        "pciAddress": {"string": f"0000:0{d}:00.0"},
                        "pciId": {"string": "0xe211"},
                        "pciRoot": {"string": f"0{d % 2}"},
                        "resource.kubernetes.io/pciBusID": {"string": f"0000:0{d}:00.0"},
                        "resource.kubernetes.io/pciRoot": {"string": f"pci0000:0{d % 2}"},
                        "sriov": {"bool": True},
                        "type": {"string": "gpu"},
                    },
                    "capacity": {"memory": {"value": "24480Mi"}, "millicores": {"value": "1k"}},
                }
                for d in range(devices)
            ],
        },
    }


_DRA_CLAIM_SPEC: Obj = {
    "devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": DRA_CLASS}}]}
}


def _dra_device_class() -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRA_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]},
    }


def _dra_claim(name: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": _DRA_CLAIM_SPEC,
    }


def _dra_objects(nodes: int, claims: int, devices_per_node: int) -> list[Obj]:
    claim_objects = [_dra_claim(f"test-claim-{i}") for i in range(claims)]
    slices = [_dra_slice(i, f"node-{i:05d}", devices_per_node) for i in range(nodes)]
    return [_dra_device_class(), *slices, *claim_objects]


def _dra_template_objects(nodes: int, devices_per_node: int) -> list[Obj]:
    """scheduler_perf's SchedulingWithResourceClaimTemplate: slices, the class, one claim template."""
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "test-claim-template", "namespace": NAMESPACE},
        "spec": {"spec": _DRA_CLAIM_SPEC},
    }
    slices = [_dra_slice(i, f"node-{i:05d}", devices_per_node) for i in range(nodes)]
    return [_dra_device_class(), *slices, template]


def _dra_allocated_claims(nodes: int, claims: int) -> list[Obj]:
    """Claims allocated before the scheduler starts (scheduler_perf's allocResourceClaims), spread
    evenly: claim i takes device i // nodes of node i % nodes (scheduler_perf picks nodes at random;
    even spreading leaves every node the same number of free devices)."""
    out = []
    for i in range(claims):
        index, device = i % nodes, i // nodes
        node_name = f"node-{index:05d}"
        body = _dra_claim(f"init-claim-{i}")
        result = {"request": "req-0", "driver": DRA_DRIVER, "pool": f"resourceslice-{index}"}
        result["device"] = f"basic-device-{device}"
        selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        body["status"] = {
            "allocation": {
                "devices": {"results": [result]},
                "nodeSelector": {"nodeSelectorTerms": [selector]},
            }
        }
        out.append(body)
    return out


def _dra_template_pod(name: str) -> Obj:
    """scheduler_perf's pod-with-claim-template: no resource requests, one claim from the template."""
    body = pod(name)
    container = body["spec"]["containers"][0]
    del container["ports"]
    container["resources"] = {"claims": [{"name": "resource"}]}
    body["spec"]["resourceClaims"] = [
        {"name": "resource", "resourceClaimTemplateName": "test-claim-template"}
    ]
    return body


def _gang_pod(name: str) -> Obj:
    """scheduler_perf's podgroup/gangscheduling gang-pod: 100m / 100Mi requests, no limits."""
    body = pod(name, memory="100Mi", limits=False)
    del body["spec"]["containers"][0]["ports"]
    return body


def _dra_pod(name: str) -> Obj:
    """scheduler_perf's pod-with-claim-ref: pod N uses claim N/5."""
    index = int(name.rsplit("-", 1)[1])
    body = pod(name, limits=False, resourceClaims=[
        {"name": "resource", "resourceClaimName": f"test-claim-{index // DRA_PODS_PER_CLAIM}"}
    ])  # fmt: skip
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "resource"}]
    return body


# (nodes, init, measure[, unschedulable]) per scale; "full" follows the brief, "small" keeps each
# run near a minute, "tiny" is the CI smoke size.
_SIZES: dict[str, dict[str, tuple[int, ...]]] = {
    "SchedulingBasic/1000Nodes": {
        "tiny": (5, 5, 20),
        "small": (1000, 1000, 1000),
        "full": (1000, 1000, 2000),
    },
    "SchedulingBasic/5000Nodes": {
        "tiny": (5, 5, 20),
        "small": (5000, 1000, 1000),
        "full": (5000, 1000, 2000),
    },
    "SchedulingPodAntiAffinity": {"tiny": (10, 2, 5), "small": (500, 100, 400), "full": (1000, 200, 600)},
    "TopologySpreading": {"tiny": (6, 6, 20), "small": (500, 1000, 1000), "full": (1000, 2000, 2000)},
    "SchedulingNodeAffinity": {"tiny": (5, 5, 20), "small": (500, 500, 1000), "full": (1000, 1000, 2000)},
    "Unschedulable": {"tiny": (5, 0, 20, 5), "small": (500, 0, 1000, 200), "full": (5000, 0, 2000, 200)},
    "PreemptionBasic": {"tiny": (5, 20, 5), "small": (500, 2000, 500), "full": (500, 2000, 500)},
    "StartUp": {"tiny": (5, 50, 1), "small": (1000, 10000, 1), "full": (5000, 50000, 1)},
    # scheduler_perf's dra/SchedulingWithResourceClaim 2000pods_200nodes / 5000pods_500nodes, without
    # their init pods (ours would be created bound, with claims nobody allocated).
    "SchedulingWithResourceClaim": {"tiny": (2, 0, 10), "small": (200, 0, 1000), "full": (500, 0, 2500)},
    # SchedulingBasic with scheduler_perf's batching profile (no system-default spreading).
    "SchedulingBasicBatching": {"tiny": (5, 5, 20), "small": (1000, 1000, 1000), "full": (1000, 1000, 2000)},
    # (nodes, init pods, measured pods, pods per gang): 100 gangs of 8 on 1,000 nodes at full scale.
    "GangScheduling": {"tiny": (10, 0, 12, 4), "small": (500, 0, 400, 8), "full": (1000, 0, 800, 8)},
}


def workloads(scale: str, perf_factor: float = 1.0) -> dict[str, Workload]:
    """All workloads at one scale, by name (the order is the order they run in)."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; one of {SCALES}")
    if scale == "perf":
        return perf_workloads(perf_factor)

    def size(name: str) -> tuple[int, ...]:
        return _SIZES[name][scale]

    out: list[Workload] = []
    for name in ("SchedulingBasic/1000Nodes", "SchedulingBasic/5000Nodes"):
        n, i, m = size(name)
        out.append(Workload(name, n, i, m, note="pod-default on node-default"))
    n, i, m = size("SchedulingPodAntiAffinity")
    out.append(
        Workload(
            "SchedulingPodAntiAffinity", n, i, m,
            init_pod=_anti_affinity_pod, measure_pod=_anti_affinity_pod,
            note="required anti-affinity to color=green on hostname: one such pod per node",
        )
    )  # fmt: skip
    n, i, m = size("TopologySpreading")
    moons = ["moon-1", "moon-2", "moon-3"]
    out.append(
        Workload(
            "TopologySpreading", n, i, m,
            node_labels=lambda k: {ZONE: moons[k % 3]}, measure_pod=_spread_pod,
            note="zones moon-1..3; maxSkew 5 DoNotSchedule on zone over color=blue",
        )
    )  # fmt: skip
    n, i, m = size("SchedulingNodeAffinity")
    out.append(
        Workload(
            "SchedulingNodeAffinity", n, i, m,
            node_labels=lambda k: {ZONE: "zone1"}, measure_pod=_node_affinity_pod,
            note="all nodes zone1; required node affinity zone In [zone1, zone2]",
        )
    )  # fmt: skip
    n, i, m, u = size("Unschedulable")
    out.append(
        Workload(
            "Unschedulable", n, i, m, unschedulable_pods=u,
            note=f"{u} pods asking 9 CPU (fit nowhere) created first, then the measured pods",
        )
    )  # fmt: skip
    n, i, m = size("PreemptionBasic")
    out.append(
        Workload(
            "PreemptionBasic", n, i, m,
            init_per_node=max(1, i // n),
            init_pod=lambda name: pod(name, cpu="900m", priority_class="bench-low", grace_zero=True),
            measure_pod=lambda name: pod(name, cpu="3", priority_class="bench-high"),
            priority_classes={"bench-low": 0, "bench-high": 10},
            note="4 x 900m low-priority pods per node; each 3-CPU high-priority pod must preempt",
        )
    )  # fmt: skip
    n, i, m = size("SchedulingWithResourceClaim")
    claims = -(-m // DRA_PODS_PER_CLAIM)
    out.append(
        Workload(
            "SchedulingWithResourceClaim", n, i, m,
            measure_pod=_dra_pod,
            cluster_objects=functools.partial(_dra_objects, n, claims, 2),
            note=f"DRA: {n} nodes with a 2-device ResourceSlice each; {claims} claims, 5 pods per claim",
        )
    )  # fmt: skip
    n, i, m = size("SchedulingBasicBatching")
    out.append(
        Workload(
            "SchedulingBasicBatching", n, i, m, plugin_config=(NO_TOPOLOGY,),
            note="SchedulingBasic/1000Nodes; PodTopologySpread defaultingType List, no default constraints",
        )
    )  # fmt: skip
    n, i, m, g = size("GangScheduling")
    out.append(
        Workload(
            "GangScheduling", n, i, m, gang_size=g,
            cluster_objects=functools.partial(_pod_groups, m // g, g),
            note=f"{m // g} PodGroups (gang, minCount {g}) of {g} pods each; GenericWorkload on",
        )
    )  # fmt: skip
    n, i, m = size("StartUp")
    out.append(
        Workload(
            "StartUp", n, i, m,
            note="time from the scheduler's start to its first bind (the warm-up pod)",
        )
    )  # fmt: skip
    return {w.name: w for w in out}


_PERF = "test/integration/scheduler_perf"


def _scaled(count: int, factor: float) -> int:
    """``count`` times ``factor``, at least 1 (0 stays 0)."""
    return max(1, round(count * factor)) if count else 0


def _scaled_gangs(groups: int, size: int, factor: float) -> tuple[int, int]:
    """Shrink the larger of (gangs, pods per gang): 3,000 gangs of 3 keep their size, 9 of 1,000 their
    number, so a smoke run still has gangs of the case's shape."""
    if factor >= 1.0:
        return groups, size
    if size > groups:
        return groups, max(2, _scaled(size, factor))
    return _scaled(groups, factor), size


def perf_workloads(factor: float = 1.0) -> dict[str, Workload]:
    """scheduler_perf's performance-labelled cases of v1.37.2, by their names, at their sizes.

    ``factor`` < 1 shrinks every count (a smoke test of the code path, not a measurement). Every
    size fits this 24 GiB machine (the largest, 5,000 nodes and 55,000 pods, is the size StartUp
    already ran at); the measured phases last tens of seconds at the rates seen so far.
    """
    if not 0.0 < factor <= 1.0:
        raise ValueError(f"perf factor {factor} is not in (0, 1]")
    shrunk = f"; every count x{factor:g} (smoke test: not the case's size)" if factor < 1.0 else ""

    def sized(*counts: int) -> list[int]:
        return [_scaled(c, factor) for c in counts]

    out: list[Workload] = []
    # misc/performance-config.yaml, SchedulingBasic (pod-default on node-default). scheduler_perf runs
    # 5000Nodes_50000Pods with SchedulerAsyncAPICalls off: the reference's default in v1.37.
    for name, (nodes, init, measure), threshold, timeout in (
        ("SchedulingBasic/5000Nodes_10000Pods", (5000, 1000, 10000), 680.0, 400.0),
        ("SchedulingBasic/5000Nodes_50000Pods", (5000, 5000, 50000), 790.0, 1200.0),
    ):
        n, i, m = sized(nodes, init, measure)
        out.append(
            Workload(
                name, n, i, m, threshold=threshold, timeout=timeout,
                source=f"{_PERF}/misc/performance-config.yaml {name}",
                note=f"pod-default on node-default{shrunk}",
            )
        )  # fmt: skip
    # dra/performance-config.yaml: the performance-labelled DRA case. 500 nodes with a 10-device
    # ResourceSlice each, 2,500 claims allocated up front, 2,500 pods each with a claim of its own
    # made from a ResourceClaimTemplate by kube-controller-manager's resourceclaim controller.
    n, claims, m = sized(500, 2500, 2500)
    name = "SchedulingWithResourceClaimTemplate/5000pods_500nodes"
    out.append(
        Workload(
            name, n, 0, m,
            measure_pod=_dra_template_pod, threshold=56.0, timeout=600.0, controllers=True,
            cluster_objects=functools.partial(_dra_template_objects, n, 10),
            allocated_objects=functools.partial(_dra_allocated_claims, n, claims),
            source=f"{_PERF}/dra/performance-config.yaml {name}",
            note=f"DRA: {n} nodes x 10 devices, {claims} claims allocated before the start, a claim per pod "
            f"from a template (kube-controller-manager runs){shrunk}",
        )
    )  # fmt: skip
    # The same file's SchedulingWithResourceClaim at its largest size (no performance label there):
    # shared claims, 5 pods each, 2 devices a node. Its 2,500 init pods are left out as at the other
    # scales (created bound, their claims would be allocated by nobody).
    n, m = sized(500, 2500)
    shared = -(-m // DRA_PODS_PER_CLAIM)
    name = "SchedulingWithResourceClaim/5000pods_500nodes"
    out.append(
        Workload(
            name, n, 0, m,
            measure_pod=_dra_pod, timeout=600.0,
            cluster_objects=functools.partial(_dra_objects, n, shared, 2),
            source=f"{_PERF}/dra/performance-config.yaml {name}",
            note=f"DRA: {n} nodes x 2 devices, {shared} claims of 5 pods each; its 2,500 init pods "
            f"left out{shrunk}",
        )
    )  # fmt: skip
    # podgroup/gangscheduling/performance-config.yaml: the largest of each shape (no thresholds there).
    for name, groups, size in (
        ("GangScheduling/5000Nodes_3000Gangs_9000Pods", 3000, 3),
        ("GangScheduling/5000Nodes_9Gangs_9000Pods_1000PerGroup", 9, 1000),
    ):
        (n,) = sized(5000)
        g, k = _scaled_gangs(groups, size, factor)
        out.append(
            Workload(
                name, n, 0, g * k, gang_size=k, measure_pod=_gang_pod, timeout=600.0,
                cluster_objects=functools.partial(_pod_groups, g, k),
                source=f"{_PERF}/podgroup/gangscheduling/performance-config.yaml {name}",
                note=f"{g} PodGroups (gang, minCount {k}) of {k} gang-pods each; GenericWorkload on{shrunk}",
            )
        )  # fmt: skip
    # Cold start: process start to the first bind, at SchedulingBasic's cluster sizes, and the
    # start-up memory at 5,000 nodes with 50,000 pods running (no scheduler_perf case measures it).
    for name, (nodes, init) in (
        ("StartUp/1000Nodes", (1000, 1000)),
        ("StartUp/5000Nodes", (5000, 1000)),
        ("StartUp/5000Nodes_50000Pods", (5000, 50000)),
    ):
        n, i = sized(nodes, init)
        out.append(
            Workload(
                name, n, i, 1, timeout=120.0,
                note=f"time from the scheduler's start to its first bind, and its peak RSS{shrunk}",
            )
        )  # fmt: skip
    return {w.name: w for w in out}
