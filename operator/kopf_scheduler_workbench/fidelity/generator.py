"""Seeded random scenarios for the fidelity run, as plain API dicts.

A scenario is a small cluster (nodes with capacity, labels, taints, images; running pods; volumes,
PDBs, Services...) and a list of pending pods that both schedulers decide one after another. The
same ``(seed, index)`` always gives the same objects, so a disagreement is replayed with
``--seed S --scenario K``. Every input a default plugin reads is drawn somewhere: requests and
limits, init and sidecar containers, overhead (RuntimeClass), pod-level resources, extended
resources, selectors and node affinity (every operator, matchFields), taints and tolerations, host
ports, inter-pod (anti-)affinity with namespaces/namespaceSelector/matchLabelKeys, topology spread
(both actions, minDomains, inclusion policies, matchLabelKeys, system defaults via owners and
Services), images, unschedulable nodes, priorities with preemption and PDBs, PVC/PV/StorageClass
(WaitForFirstConsumer, zones, CSINode limits), DRA (DeviceClasses, node-local and zone-wide
ResourceSlices, claims with counts, CEL selectors, constraints, firstAvailable, shared claims), gangs
(opt-in: PodGroups with minCount, their members created before or after the group, in any order), and
now and then more than 100 nodes.

Objects are only ever what the apiserver accepts; values are picked so every scheduler outcome
(bound, each rejection, preemption) shows up often, not so the cluster looks realistic.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CSI_DRIVER",
    "EXTENDED",
    "GANG_API",
    "PRIORITY_CLASSES",
    "RUNTIME_CLASS",
    "Features",
    "Scenario",
    "generate",
    "run_objects",
]

Obj = dict[str, Any]

ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
HOSTNAME = "kubernetes.io/hostname"
EXTENDED = "example.com/gpu"
CSI_DRIVER = "csi.fidelity.example.com"
RUNTIME_CLASS = "fid-overhead"
LABEL = "fidelity.kopf-scheduler.io/run"  # on every object the run creates
# name -> (value, preemptionPolicy)
PRIORITY_CLASSES: dict[str, tuple[int, str]] = {
    "fid-low": (10, "PreemptLowerPriority"),
    "fid-mid": (100, "PreemptLowerPriority"),
    "fid-high": (1000, "PreemptLowerPriority"),
    "fid-never": (1000, "Never"),
}
IMAGES = {
    "registry.example.com/big:1": 900 * 2**20,
    "registry.example.com/mid:1": 300 * 2**20,
    "registry.example.com/small:1": 40 * 2**20,
    "registry.example.com/tiny:1": 5 * 2**20,
}
APPS = ("web", "db", "cache")
GANG_API = "scheduling.k8s.io/v1beta1"  # PodGroup: served with GenericWorkload on
VERSIONS = ("v1", "v2")


@dataclass(frozen=True)
class Features:
    """Which feature families a scenario may draw; all but ``gang`` on by default (``--features``
    narrows). ``gang`` is opt-in: it needs GenericWorkload on in the apiserver and both schedulers,
    which changes the default profile (GangScheduling) every other family is measured under."""

    resources: bool = True
    containers: bool = True  # init, sidecar, overhead, pod-level resources
    node_affinity: bool = True
    taints: bool = True
    ports: bool = True
    pod_affinity: bool = True
    spread: bool = True
    images: bool = True
    preemption: bool = True
    volumes: bool = True
    large: bool = True  # > 100 nodes now and then
    dra: bool = True  # DeviceClasses, ResourceSlices and pods with ResourceClaims
    gang: bool = False  # PodGroups (scheduling.k8s.io/v1beta1) and their members, decided as one

    @classmethod
    def only(cls, names: list[str]) -> Features:
        known = set(cls.__dataclass_fields__)
        unknown = set(names) - known
        if unknown:
            raise ValueError(f"unknown features {sorted(unknown)}; choose from {sorted(known)}")
        return cls(**{k: k in names for k in known})


@dataclass
class Scenario:
    """One cluster state and the pods to decide in it, in order; names are unique per seed and index."""

    seed: int
    index: int
    large: bool
    namespaces: list[Obj] = field(default_factory=list)
    cluster_objects: list[Obj] = field(default_factory=list)  # StorageClass, PV, CSINode
    namespaced_objects: list[Obj] = field(default_factory=list)  # PVC, PDB, Service, ReplicaSet
    nodes: list[Obj] = field(default_factory=list)
    running: list[Obj] = field(default_factory=list)  # spec.nodeName set
    pending: list[Obj] = field(default_factory=list)
    # Gangs, each decided as one step before pending[at] (at == len(pending): after the last):
    # {"group": PodGroup, "members": [Pod], "group_first": bool, "at": int}; members in creation order.
    gangs: list[Obj] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        return f"s{self.seed}-k{self.index}"


def run_objects() -> list[Obj]:
    """Objects shared by every scenario of a run: PriorityClasses and the RuntimeClass for overhead."""
    objs: list[Obj] = []
    for name, (value, policy) in PRIORITY_CLASSES.items():
        objs.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name, "labels": {LABEL: "1"}},
                "value": value,
                "preemptionPolicy": policy,
            }
        )
    objs.append(
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": RUNTIME_CLASS, "labels": {LABEL: "1"}},
            "handler": "runc",
            "overhead": {"podFixed": {"cpu": "150m", "memory": "64Mi"}},
        }
    )
    return objs


class _Gen:
    """The drawing state of one scenario (its rng, names and the objects made so far)."""

    def __init__(self, seed: int, index: int, features: Features) -> None:
        self.rng = random.Random(f"fidelity:{seed}:{index}")
        self.f = features
        self.sc = Scenario(seed, index, large=features.large and self.rng.random() < 0.06)
        self.p = self.sc.prefix
        self.zones = [f"{self.p}-z{i}" for i in range(self.rng.choice((1, 2, 3, 3)))]
        self.ns = [f"{self.p}-a", f"{self.p}-b"]
        self.team = {self.ns[0]: "red", self.ns[1]: self.rng.choice(("red", "blue"))}
        self.node_names: list[str] = []
        self.taints: list[Obj] = []
        self.bound_claims: list[tuple[str, str, str]] = []  # (ns, claim, access mode)
        self.unbound_claims: list[tuple[str, str]] = []
        self.owners: dict[str, Obj] = {}  # ns -> ReplicaSet
        self.pod_count = 0
        # DRA draws from an rng of its own, so scenarios of earlier runs keep every other object.
        self.drng = random.Random(f"fidelity-dra:{seed}:{index}")
        self.dra_driver = ""  # set when this scenario has DRA devices
        self.dra_classes: list[str] = []
        self.dra_claims: list[tuple[str, str]] = []  # (ns, claim) made for earlier pending pods
        # Gangs too: a scenario drawn without them is object for object what it was before.
        self.grng = random.Random(f"fidelity-gang:{seed}:{index}")

    # -- helpers --

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, seq: Any) -> Any:
        return self.rng.choice(list(seq))

    # -- the cluster --

    def build(self) -> Scenario:
        sc = self.sc
        for ns in self.ns:
            sc.namespaces.append(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ns, "labels": {LABEL: "1", "team": self.team[ns]}},
                }
            )
        # Above 100 nodes the reference stops after finding max(100, (50 - n/125) %) feasible ones.
        count = self.rng.randint(101, 260) if sc.large else self.rng.randint(1, 7)
        for i in range(count):
            sc.nodes.append(self.node(i))
        if self.f.volumes and not sc.large:
            self.volumes()
        if self.f.spread and not sc.large and self.chance(0.25):
            self.owners_and_services()
        if self.f.preemption and not sc.large and self.chance(0.4):
            self.pdbs()
        if self.f.dra and not sc.large and self.drng.random() < 0.35:
            self.dra()
        running = 0 if sc.large and self.chance(0.5) else self.rng.randint(0, 3 * len(sc.nodes))
        for _ in range(min(running, 40)):
            sc.running.append(self.pod(running=True))
        for _ in range(self.rng.randint(2, 6)):
            sc.pending.append(self.pod(running=False))
        if self.f.gang and not sc.large and self.grng.random() < 0.85:
            self.gangs()
        return sc

    def node(self, i: int) -> Obj:
        name = f"{self.p}-n{i}"
        self.node_names.append(name)
        labels = {HOSTNAME: name, LABEL: "1"}
        if self.zones and self.chance(0.9):
            labels[ZONE] = self.pick(self.zones)
            labels[REGION] = f"{self.p}-r0"
        if self.chance(0.6):
            labels["disk"] = self.pick(("ssd", "hdd"))
        if self.chance(0.6):
            labels["tier"] = str(self.rng.randint(1, 5))
        if self.chance(0.3):
            labels["gpu"] = "true"
        large = self.sc.large
        cpu = self.pick(("1", "2", "4", "2500m")) if self.f.resources else "8"
        memory = self.pick(("2Gi", "4Gi", "8Gi", "3500Mi")) if self.f.resources else "32Gi"
        pods = self.pick(("110", "110", "110", "4")) if not large else "110"
        allocatable: Obj = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "20Gi"}
        if self.f.resources and labels.get("gpu"):
            allocatable[EXTENDED] = str(self.rng.randint(0, 2))
        spec: Obj = {}
        if self.f.taints and self.chance(0.3 if not large else 0.15):
            spec["taints"] = self.node_taints()
        if self.chance(0.08):
            spec["unschedulable"] = True
        status: Obj = {"capacity": dict(allocatable), "allocatable": allocatable}
        if self.f.images and self.chance(0.6):
            chosen = self.rng.sample(sorted(IMAGES), self.rng.randint(1, 3))
            status["images"] = [{"names": [img], "sizeBytes": IMAGES[img]} for img in chosen]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
            "status": status,
        }

    def node_taints(self) -> list[Obj]:
        out: list[Obj] = []
        for key in self.rng.sample(["dedicated", "maintenance", "spot"], self.rng.randint(1, 2)):
            effect = self.pick(
                ("NoSchedule", "PreferNoSchedule", "NoExecute", "NoSchedule", "PreferNoSchedule")
            )
            taint: Obj = {"key": key, "effect": effect}
            if self.chance(0.7):
                taint["value"] = self.pick(("a", "b"))
            out.append(taint)
            self.taints.append(taint)
        return out

    def volumes(self) -> None:
        sc = self.sc
        wffc, imm = f"{self.p}-wffc", f"{self.p}-imm"
        for name, mode in ((wffc, "WaitForFirstConsumer"), (imm, "Immediate")):
            sc.cluster_objects.append(
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {"name": name, "labels": {LABEL: "1"}},
                    "provisioner": "kubernetes.io/no-provisioner",
                    "volumeBindingMode": mode,
                }
            )
        for node in self.node_names:
            if self.chance(0.6):
                driver: Obj = {"name": CSI_DRIVER, "nodeID": node, "topologyKeys": [HOSTNAME]}
                if self.chance(0.8):
                    driver["allocatable"] = {"count": self.rng.randint(0, 2)}
                sc.cluster_objects.append(
                    {
                        "apiVersion": "storage.k8s.io/v1",
                        "kind": "CSINode",
                        "metadata": {"name": node, "labels": {LABEL: "1"}},
                        "spec": {"drivers": [driver]},
                    }
                )
        for i in range(self.rng.randint(0, 4)):
            ns = self.pick(self.ns)
            claim, pv = f"{self.p}-c{i}", f"{self.p}-pv{i}"
            mode = self.pick(("ReadWriteOnce", "ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany"))
            pv_obj: Obj = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": pv, "labels": {LABEL: "1"}},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": [mode],
                    "storageClassName": wffc,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "csi": {"driver": CSI_DRIVER, "volumeHandle": pv},
                    "claimRef": {"namespace": ns, "name": claim},
                },
                "status": {"phase": "Bound"},
            }
            where = self.chance(0.6)
            if where and self.zones:
                zone = self.pick(self.zones)
                pv_obj["metadata"]["labels"][ZONE] = zone
                pv_obj["spec"]["nodeAffinity"] = {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}
                        ]
                    }
                }
            elif where:
                host = self.pick(self.node_names)
                pv_obj["spec"]["nodeAffinity"] = {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [host]}]}
                        ]
                    }
                }
            sc.cluster_objects.append(pv_obj)
            sc.namespaced_objects.append(self.claim(ns, claim, wffc, mode, volume=pv))
            self.bound_claims.append((ns, claim, mode))
        for i in range(1 if self.chance(0.15) else 0):  # never bindable: no PV of their class fits
            ns = self.pick(self.ns)
            cls = self.pick((wffc, imm))
            claim = f"{self.p}-u{i}"
            sc.namespaced_objects.append(self.claim(ns, claim, cls, "ReadWriteOnce", storage="50Gi"))
            self.unbound_claims.append((ns, claim))

    def claim(self, ns: str, name: str, cls: str, mode: str, volume: str = "", storage: str = "1Gi") -> Obj:
        obj: Obj = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ns, "labels": {LABEL: "1"}},
            "spec": {
                "accessModes": [mode],
                "storageClassName": cls,
                "resources": {"requests": {"storage": storage}},
            },
        }
        if volume:
            obj["spec"]["volumeName"] = volume
            obj["status"] = {"phase": "Bound", "accessModes": [mode], "capacity": {"storage": "1Gi"}}
            if self.chance(0.9):  # the PV controller's mark; without it a claim is only pre-bound
                obj["metadata"]["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
        return obj

    def owners_and_services(self) -> None:
        """Owners and Services give pods without constraints the system default spreading."""
        for ns in self.ns:
            app = self.pick(APPS)
            rs: Obj = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": f"{self.p}-rs", "namespace": ns, "labels": {LABEL: "1"}},
                "spec": {
                    "replicas": 0,  # no controller runs; the scheduler only reads its selector
                    "selector": {"matchLabels": {"app": app}},
                    "template": {
                        "metadata": {"labels": {"app": app}},
                        "spec": {"containers": [{"name": "c", "image": "registry.example.com/tiny:1"}]},
                    },
                },
            }
            self.sc.namespaced_objects.append(rs)
            self.owners[ns] = rs
            if self.chance(0.5):
                self.sc.namespaced_objects.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "metadata": {"name": f"{self.p}-svc", "namespace": ns, "labels": {LABEL: "1"}},
                        "spec": {"selector": {"app": self.pick(APPS)}, "ports": [{"port": 80}]},
                    }
                )

    def pdbs(self) -> None:
        for ns in self.ns:
            if self.chance(0.6):
                allowed = self.rng.randint(0, 1)
                self.sc.namespaced_objects.append(
                    {
                        "apiVersion": "policy/v1",
                        "kind": "PodDisruptionBudget",
                        "metadata": {"name": f"{self.p}-pdb", "namespace": ns, "labels": {LABEL: "1"}},
                        "spec": {"selector": {"matchLabels": {"app": self.pick(APPS)}}, "maxUnavailable": 1},
                        # No disruption controller runs: the runner writes this status as drawn.
                        "status": {
                            "disruptionsAllowed": allowed,
                            "currentHealthy": 2,
                            "desiredHealthy": 2 - allowed,
                            "expectedPods": 2,
                            "observedGeneration": 1,
                        },
                    }
                )

    # -- pods --

    def pod(self, *, running: bool) -> Obj:
        self.pod_count += 1
        ns = self.pick(self.ns)
        name = f"{self.p}-{'r' if running else 'p'}{self.pod_count}"
        app = self.pick(APPS)
        labels = {"app": app, "version": self.pick(VERSIONS), LABEL: "1"}
        # The default grace period: a deleted victim stays terminating (no kubelet finishes it) and
        # the preemptor waits for it, as in a real cluster; the runner finishes deletions itself.
        spec: Obj = {"containers": [self.container(0)]}
        large = self.sc.large
        if self.f.containers and not large:
            self.extra_containers(spec)
        if self.f.preemption and self.chance(0.6):
            spec["priorityClassName"] = self.pick(PRIORITY_CLASSES)
        if self.f.node_affinity:
            self.node_constraints(spec)
        if self.f.taints and self.taints and self.chance(0.5):
            spec["tolerations"] = self.tolerations()
        if self.f.ports and self.chance(0.25):
            port: Obj = {
                "containerPort": 8080,
                "hostPort": self.pick((8080, 8081)),
                "protocol": self.pick(("TCP", "TCP", "UDP")),
            }
            if self.chance(0.2):
                port["hostIP"] = self.pick(("127.0.0.1", "0.0.0.0"))
            spec["containers"][0]["ports"] = [port]
        if self.f.pod_affinity and not large and self.chance(0.35):
            spec["affinity"] = {**spec.get("affinity", {}), **self.pod_affinity(app)}
        if self.f.spread and not large and self.chance(0.35):
            spec["topologySpreadConstraints"] = self.spread(app)
        if self.f.volumes and not large and (self.bound_claims or self.unbound_claims) and self.chance(0.35):
            self.pod_volumes(ns, spec)
        meta: Obj = {"name": name, "namespace": ns, "labels": labels}
        owner = self.owners.get(ns)
        if owner is not None and self.chance(0.6):
            labels["app"] = owner["spec"]["selector"]["matchLabels"]["app"]
            meta["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": owner["metadata"]["name"],
                    "uid": "",
                    "controller": True,
                }
            ]
        if self.dra_driver and not running and self.drng.random() < 0.6:
            if self.drng.random() < 0.2:  # the extended resource, asked for as any resource
                amount = str(self.drng.choice((1, 1, 2)))
                resources = spec["containers"][0].setdefault("resources", {})
                for kind in ("requests", "limits"):
                    resources.setdefault(kind, {})[f"{self.dra_driver}/gpu"] = amount
            else:
                self.pod_claims(ns, name, spec)
        pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
        if running:
            spec["nodeName"] = self.pick(self.node_names)
            spec["schedulerName"] = "fidelity-placed"
            # What a kubelet would report; preemption breaks ties on the victims' start time, and a
            # pod without one counts as started "now", a different instant in each scheduler.
            start = f"2026-01-01T{self.pod_count // 60 % 24:02d}:{self.pod_count % 60:02d}:00Z"
            pod["status"] = {"phase": "Running", "startTime": start}
        return pod

    def quantity_cpu(self) -> str:
        return self.pick(("50m", "100m", "250m", "500m", "700m", "1", "1500m"))

    def quantity_mem(self) -> str:
        return self.pick(("32Mi", "128Mi", "256Mi", "512Mi", "1Gi", "2Gi"))

    def container(self, i: int, image: str | None = None) -> Obj:
        img = image or (self.pick(sorted(IMAGES)) if self.f.images else "registry.example.com/tiny:1")
        c: Obj = {"name": f"c{i}", "image": img}
        if not self.f.resources:
            return c
        style = self.rng.random()
        res: Obj = {}
        if style < 0.55:
            res["requests"] = {"cpu": self.quantity_cpu(), "memory": self.quantity_mem()}
        elif style < 0.7:
            res["limits"] = {"cpu": self.quantity_cpu(), "memory": self.quantity_mem()}  # requests = limits
        elif style < 0.8:
            res["requests"] = {"cpu": self.quantity_cpu()}  # memory: the non-zero default in scoring
        elif style < 0.9:
            req = {"cpu": self.quantity_cpu(), "memory": self.quantity_mem()}
            res["requests"], res["limits"] = req, dict(req)
        if self.chance(0.1):
            res.setdefault("requests", {})["ephemeral-storage"] = self.pick(("1Gi", "30Gi"))
        if self.chance(0.12):
            n = str(self.rng.randint(1, 2))
            res.setdefault("requests", {})[EXTENDED] = n
            res.setdefault("limits", {})[EXTENDED] = n  # extended resources need limits == requests
        if res:
            c["resources"] = res
        return c

    def extra_containers(self, spec: Obj) -> None:
        if self.chance(0.2):
            spec["containers"].append(self.container(1))
        inits: list[Obj] = []
        if self.chance(0.2):
            inits.append(self.container(10))
        if self.chance(0.15):
            sidecar = self.container(11)
            sidecar["restartPolicy"] = "Always"
            inits.append(sidecar)
        if inits:
            spec["initContainers"] = inits
        if self.chance(0.1):
            spec["runtimeClassName"] = RUNTIME_CLASS
        elif self.chance(0.08):
            # Pod-level requests must cover the containers'; a generous fixed amount does.
            for c in (*spec["containers"], *inits):
                c.pop("resources", None)
            spec["resources"] = {
                "requests": {"cpu": self.pick(("300m", "1200m")), "memory": "256Mi"},
                "limits": {"cpu": "2", "memory": "1Gi"},
            }

    def node_constraints(self, spec: Obj) -> None:
        if self.chance(0.15):
            spec["nodeSelector"] = {"disk": self.pick(("ssd", "hdd"))}
        required: list[Obj] = []
        if self.chance(0.25):
            for _ in range(self.rng.randint(1, 2)):
                term: Obj = {
                    "matchExpressions": [self.node_expression() for _ in range(self.rng.randint(1, 2))]
                }
                if self.chance(0.2):  # metadata.name takes exactly one value
                    term["matchFields"] = [
                        {
                            "key": "metadata.name",
                            "operator": self.pick(("In", "NotIn")),
                            "values": [self.pick(self.node_names)],
                        }
                    ]
                required.append(term)
        preferred: list[Obj] = []
        if self.chance(0.25):
            for _ in range(self.rng.randint(1, 2)):
                preferred.append(
                    {
                        "weight": self.rng.randint(1, 100),
                        "preference": {"matchExpressions": [self.node_expression()]},
                    }
                )
        na: Obj = {}
        if required:
            na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": required}
        if preferred:
            na["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
        if na:
            spec["affinity"] = {"nodeAffinity": na}

    def node_expression(self) -> Obj:
        op = self.pick(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"))
        if op in ("Gt", "Lt"):
            return {"key": "tier", "operator": op, "values": [str(self.rng.randint(1, 5))]}
        key = self.pick(("disk", ZONE, "gpu"))
        if op in ("Exists", "DoesNotExist"):
            return {"key": key, "operator": op}
        values = {"disk": ["ssd", "hdd"], ZONE: self.zones or ["none"], "gpu": ["true"]}[key]
        return {
            "key": key,
            "operator": op,
            "values": self.rng.sample(values, self.rng.randint(1, len(values))),
        }

    def tolerations(self) -> list[Obj]:
        out: list[Obj] = []
        for taint in self.rng.sample(self.taints, min(len(self.taints), self.rng.randint(1, 3))):
            tol: Obj = {"key": taint["key"]}
            if "value" in taint and self.chance(0.7):
                tol["operator"] = "Equal"
                tol["value"] = taint["value"] if self.chance(0.8) else "z"
            else:
                tol["operator"] = "Exists"
            if self.chance(0.7):
                tol["effect"] = taint["effect"]
                if taint["effect"] == "NoExecute" and self.chance(0.3):
                    tol["tolerationSeconds"] = 30
            out.append(tol)
        if self.chance(0.05):
            out.append({"operator": "Exists"})  # tolerates everything
        return out

    def pod_term(self, app: str) -> Obj:
        term: Obj = {
            "topologyKey": self.pick((HOSTNAME, ZONE, ZONE)),
            "labelSelector": {"matchLabels": {"app": self.pick((app, *APPS))}},
        }
        choice = self.rng.random()
        if choice < 0.2:
            term["namespaces"] = self.rng.sample(self.ns, self.rng.randint(1, 2))
        elif choice < 0.35:
            term["namespaceSelector"] = {"matchLabels": {"team": self.pick(("red", "blue"))}}
        elif choice < 0.4:
            term["namespaceSelector"] = {}  # every namespace
        if self.chance(0.2):
            term["matchLabelKeys"] = ["version"]
        return term

    def pod_affinity(self, app: str) -> Obj:
        out: Obj = {}
        for kind in ("podAffinity", "podAntiAffinity"):
            if not self.chance(0.6):
                continue
            block: Obj = {}
            if self.chance(0.5):
                block["requiredDuringSchedulingIgnoredDuringExecution"] = [self.pod_term(app)]
            if self.chance(0.6):
                block["preferredDuringSchedulingIgnoredDuringExecution"] = [
                    {"weight": self.rng.randint(1, 100), "podAffinityTerm": self.pod_term(app)}
                ]
            if block:
                out[kind] = block
        return out

    def spread(self, app: str) -> list[Obj]:
        out: list[Obj] = []
        keys = self.rng.sample([HOSTNAME, ZONE], self.rng.randint(1, 2))
        for key in keys:
            action = self.pick(("DoNotSchedule", "ScheduleAnyway"))
            c: Obj = {
                "maxSkew": self.rng.randint(1, 2),
                "topologyKey": key,
                "whenUnsatisfiable": action,
                "labelSelector": {"matchLabels": {"app": self.pick((app, app, *APPS))}},
            }
            if action == "DoNotSchedule" and self.chance(0.25):
                c["minDomains"] = self.rng.randint(1, 4)
            if self.chance(0.25):
                c["nodeAffinityPolicy"] = self.pick(("Honor", "Ignore"))
            if self.chance(0.25):
                c["nodeTaintsPolicy"] = self.pick(("Honor", "Ignore"))
            if self.chance(0.2):
                c["matchLabelKeys"] = ["version"]
            out.append(c)
        return out

    def pod_volumes(self, ns: str, spec: Obj) -> None:
        mine = [c for n, c, _ in self.bound_claims if n == ns] + [
            c for n, c in self.unbound_claims if n == ns
        ]
        if not mine:
            return
        chosen = self.rng.sample(mine, self.rng.randint(1, min(2, len(mine))))
        spec["volumes"] = [
            {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(chosen)
        ]

    # -- dynamic resource allocation --

    def dra(self) -> None:
        """A driver of this scenario's own: classes, and devices on some nodes (or a zone's)."""
        r, sc = self.drng, self.sc
        driver = self.dra_driver = f"{self.p}.dra.example.com"
        classes = {
            f"{self.p}-gpu": f'device.driver == "{driver}"',
            f"{self.p}-gpu-b": f'device.driver == "{driver}" && device.attributes["{driver}"].model == "b"',
        }
        for name, expression in classes.items():
            self.dra_classes.append(name)
            spec: Obj = {"selectors": [{"cel": {"expression": expression}}]}
            if name == f"{self.p}-gpu":  # DRAExtendedResource: `<driver>/gpu` in container requests
                spec["extendedResourceName"] = f"{driver}/gpu"
            sc.cluster_objects.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": name, "labels": {LABEL: "1"}},
                    "spec": spec,
                }
            )

        def devices(prefix: str, count: int) -> list[Obj]:
            return [
                {
                    "name": f"{prefix}{d}",
                    "attributes": {
                        "model": {"string": r.choice(("a", "b"))},
                        "numa": {"int": r.randint(0, 1)},
                        "driverVersion": {"version": r.choice(("1.0.0", "1.2.0"))},
                    },
                    "capacity": {"memory": {"value": r.choice(("8Gi", "16Gi"))}},
                }
                for d in range(count)
            ]

        for node in self.node_names:
            if r.random() < 0.7:
                sc.cluster_objects.append(
                    self.dra_slice(f"{node}-dev", {"nodeName": node}, node, devices("dev", r.randint(1, 3)))
                )
        if self.zones and r.random() < 0.25:
            zone = r.choice(self.zones)
            selector = {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}
                ]
            }
            sc.cluster_objects.append(
                self.dra_slice(f"{zone}-net", {"nodeSelector": selector}, f"{zone}-net", devices("net", 2))
            )

    def dra_slice(self, name: str, where: Obj, pool: str, devices: list[Obj]) -> Obj:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name, "labels": {LABEL: "1"}},
            "spec": {
                "driver": self.dra_driver,
                **where,
                "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }

    def pod_claims(self, ns: str, name: str, spec: Obj) -> None:
        """One claim for the pod (now and then one an earlier pod has too), of varied requests."""
        r, driver = self.drng, self.dra_driver
        mine = [c for n, c in self.dra_claims if n == ns]
        if mine and r.random() < 0.2:
            claim_name = r.choice(mine)
        else:
            claim_name = f"{name}-gpu"
            exactly: Obj = {"deviceClassName": r.choice(self.dra_classes)}
            if r.random() < 0.05:
                exactly["deviceClassName"] = f"{self.p}-missing"  # the reference's unknown-class message
            if r.random() < 0.3:
                exactly["count"] = 2
            if r.random() < 0.3:
                exactly["selectors"] = [
                    {"cel": {"expression": r.choice((
                        f'device.capacity["{driver}"].memory.compareTo(quantity("16Gi")) >= 0',
                        f'device.attributes["{driver}"].numa == 1',
                        f'device.attributes["{driver}"].driverVersion.isGreaterThan(semver("1.1.0"))',
                    ))}}
                ]  # fmt: skip
            devices: Obj
            if r.random() < 0.15:
                subs = [
                    {"name": "two", "deviceClassName": exactly["deviceClassName"], "count": 2},
                    {"name": "one", "deviceClassName": exactly["deviceClassName"]},
                ]
                devices = {"requests": [{"name": "gpu", "firstAvailable": subs}]}
            else:
                devices = {"requests": [{"name": "gpu", "exactly": exactly}]}
                if exactly.get("count") == 2 and r.random() < 0.5:
                    devices["constraints"] = [{"matchAttribute": f"{driver}/numa"}]
            self.sc.namespaced_objects.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": claim_name, "namespace": ns, "labels": {LABEL: "1"}},
                    "spec": {"devices": devices},
                }
            )
            self.dra_claims.append((ns, claim_name))
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
        spec["containers"][0].setdefault("resources", {})["claims"] = [{"name": "gpu"}]

    # -- gang scheduling --

    def gangs(self) -> None:
        """1-3 gangs, each of identical members (one template, as a Job's), sized against the nodes
        so that some fit whole, some cannot (none of their members binds), some fall short of
        minCount (never tried), some compete for the same nodes; and plain pods that take cpu."""
        r, sc = self.grng, self.sc
        cpus = [_millicpu(n["status"]["allocatable"]["cpu"]) for n in sc.nodes]
        for j in range(r.choice((1, 1, 2, 2, 3))):
            size = r.randint(2, 6)
            shape = r.random()
            if shape < 0.1:
                min_count = size + 1  # short: the group is never let in
            elif shape < 0.35 and size > 2:
                min_count = r.randint(2, size - 1)  # more members than needed
            else:
                min_count = size
            ns = r.choice(self.ns)
            group = f"{self.p}-g{j}"
            # A fraction of one node: 1 to 3 members a node, so the gang fits or not by its size.
            cpu = max(10, int(r.choice(cpus) * r.choice((0.3, 0.45, 0.6, 0.9))) // 10 * 10)
            spec: Obj = {
                "schedulingGroup": {"podGroupName": group},
                "containers": [
                    {
                        "name": "c0",
                        "image": "registry.example.com/tiny:1",
                        "resources": {"requests": {"cpu": f"{cpu}m", "memory": r.choice(("64Mi", "256Mi"))}},
                    }
                ],
            }
            labels = {LABEL: "1", "gang": group}
            if r.random() < 0.2:
                spec["nodeSelector"] = {"disk": r.choice(("ssd", "hdd"))}
            if r.random() < 0.2:  # one member a node
                spec["affinity"] = {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"gang": group}}}
                        ]
                    }
                }
            members = [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"{group}-m{m}", "namespace": ns, "labels": dict(labels)},
                    "spec": json.loads(json.dumps(spec)),
                }
                for m in range(size)
            ]
            r.shuffle(members)  # arrival order
            pod_group: Obj = {
                "apiVersion": GANG_API,
                "kind": "PodGroup",
                "metadata": {"name": group, "namespace": ns, "labels": {LABEL: "1"}},
                "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
            }
            # The group first only when the last member to arrive completes it (or none can):
            # otherwise a cycle may start with minCount members while the rest are still coming,
            # in either scheduler, and what it decides then depends on timing.
            group_first = min_count >= size and r.random() < 0.5
            at = r.randint(0, len(sc.pending))
            sc.gangs.append({"group": pod_group, "members": members, "group_first": group_first, "at": at})
        for k in range(r.randint(0, 2)):  # plain pods competing for the same cpu
            cpu = max(10, int(r.choice(cpus) * r.choice((0.3, 0.6))) // 10 * 10)
            pod: Obj = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{self.p}-gp{k}",
                    "namespace": r.choice(self.ns),
                    "labels": {LABEL: "1"},
                },
                "spec": {
                    "containers": [
                        {
                            "name": "c0",
                            "image": "registry.example.com/tiny:1",
                            "resources": {"requests": {"cpu": f"{cpu}m"}},
                        }
                    ],
                },
            }
            sc.pending.insert(r.randint(0, len(sc.pending)), pod)


def _millicpu(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def generate(seed: int, index: int, features: Features | None = None) -> Scenario:
    """Scenario ``index`` of the run seeded ``seed``: the same objects on every call."""
    return _Gen(seed, index, features or Features()).build()
