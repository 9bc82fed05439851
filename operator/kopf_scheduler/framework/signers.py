"""Signature fragments shared by plugins (the reference's ``kube-scheduler/framework/signers.go``).

Each returns a hashable value that is equal for two pods exactly when the part of the pod it covers
is the same; keys are the reference's signer names. Orders that do not matter (tolerations, ports,
volumes) are sorted away so equal pods written differently still batch.
"""

from __future__ import annotations

from collections.abc import Hashable

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.types import Resource
from kopf_scheduler.api.volumes import PERSISTENT_VOLUME_CLAIM

__all__ = [
    "FEATURES",
    "HOST_PORTS",
    "IMAGE_NAMES",
    "LABELS",
    "NODE_AFFINITY",
    "NODE_NAME",
    "NODE_SELECTOR",
    "RESOURCES",
    "TOLERATIONS",
    "VOLUMES",
    "host_ports",
    "labels",
    "node_affinity",
    "node_selector",
    "resources",
    "tolerations",
    "volumes",
]

IMAGE_NAMES = "v1.Pod.Spec.CanonicalImageNames()"
LABELS = "v1.Pod.Labels"
NODE_NAME = "v1.Pod.Spec.NodeName"
NODE_AFFINITY = "v1.Pod.Spec.Affinity.NodeAffinity"
NODE_SELECTOR = "v1.Pod.Spec.Affinity.NodeSelector"
HOST_PORTS = "v1.Pod.Spec.HostPorts()"
RESOURCES = "v1.Pod.Spec.ContainerRequestsAndOverheads()"
TOLERATIONS = "v1.Pod.Spec.Tolerations"
VOLUMES = "v1.Pod.Spec.Volumes.NonSyntheticSources()"
FEATURES = "v1.Pod.Spec.RequiredFeatures()"


def _resource(r: Resource) -> Hashable:
    return (r.milli_cpu, r.memory, r.ephemeral_storage, r.allowed_pod_number, tuple(sorted(r.scalar.items())))


def resources(pod: Pod) -> Hashable:
    """What NodeResourcesFit filters on and what the resource scorers count."""
    return (_resource(pod.filter_requests), _resource(pod.score_requests))


def tolerations(pod: Pod) -> Hashable:
    return tuple(sorted(pod.tolerations, key=lambda t: (t.key, t.value, t.operator, t.effect)))


def host_ports(pod: Pod) -> Hashable:
    return tuple(sorted({p.port for p in pod.host_ports if p.port}))


def volumes(pod: Pod) -> Hashable:
    """Volume sources except ConfigMaps and Secrets (they never affect placement and would make
    every pod's signature unique), by content, not by name: each source's marshalled content
    (parsed once, see ``api/volumes.py``), a claim by its name and read-only flag."""
    out = []
    for vol in pod.volumes:
        source = vol.source
        if source.content is not None:
            out.append((source.content, "", False))
        elif source.kind == PERSISTENT_VOLUME_CLAIM:
            out.append(("", vol.claim_name or "", source.read_only))
    return tuple(sorted(out))


def node_affinity(pod: Pod) -> Hashable:
    aff = pod.affinity.node_affinity if pod.affinity is not None else None
    return repr(aff) if aff is not None else None


def node_selector(pod: Pod) -> Hashable:
    return tuple(sorted(pod.node_selector.items()))


def labels(pod: Pod) -> Hashable:
    return tuple(sorted(pod.labels.items()))
