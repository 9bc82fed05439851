"""Typed views of core/v1 kinds other than Pod and Node: Namespace, Service, ReplicationController.

InterPodAffinity unrolls a term's ``namespaceSelector`` over the Namespaces' labels;
PodTopologySpread's system-default constraints select by the Services that select a pod and by
its controlling ReplicationController (``helper.DefaultSelector``). Parsed once at the edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.api.meta import ObjectMeta, parse_meta, parse_namespaced_meta
from kopf_scheduler.api.types import as_mapping, as_str_map

__all__ = [
    "Namespace",
    "ReplicationController",
    "Service",
    "parse_namespace",
    "parse_replication_controller",
    "parse_service",
]


@dataclass(frozen=True, slots=True)
class Namespace:
    """Only its labels matter to the scheduler (``metadata.labels``)."""

    metadata: ObjectMeta


@dataclass(frozen=True, slots=True)
class Service:
    metadata: ObjectMeta
    # spec.selector; None (nil) selects no pod, an empty one every pod of the namespace.
    selector: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class ReplicationController:
    metadata: ObjectMeta
    # spec.selector (a plain label map); None when unset.
    selector: Mapping[str, str] | None = None


def _label_map(raw: Any, path: str) -> Mapping[str, str] | None:
    """A ``map[string]string`` selector, keeping nil apart from empty."""
    return None if raw is None else as_str_map(raw, path)


def parse_namespace(raw: Mapping[str, Any]) -> Namespace:
    return Namespace(parse_meta(raw.get("metadata")))


def parse_service(raw: Mapping[str, Any]) -> Service:
    spec = as_mapping(raw.get("spec"), "spec")
    return Service(
        parse_namespaced_meta(raw.get("metadata")), _label_map(spec.get("selector"), "spec.selector")
    )


def parse_replication_controller(raw: Mapping[str, Any]) -> ReplicationController:
    spec = as_mapping(raw.get("spec"), "spec")
    return ReplicationController(
        parse_namespaced_meta(raw.get("metadata")), _label_map(spec.get("selector"), "spec.selector")
    )
