"""Typed views of ``apps/v1``: ReplicaSet and StatefulSet, as PodTopologySpread's system-default
constraints read them (a pod's controller's ``spec.selector``, ``helper.DefaultSelector``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.api.meta import ObjectMeta, parse_namespaced_meta
from kopf_scheduler.api.selectors import parse_label_selector
from kopf_scheduler.api.types import LabelSelector, as_mapping

__all__ = ["ReplicaSet", "StatefulSet", "parse_replica_set", "parse_stateful_set"]


@dataclass(frozen=True, slots=True)
class ReplicaSet:
    metadata: ObjectMeta
    selector: LabelSelector | None = None  # spec.selector; None (nil) selects nothing


@dataclass(frozen=True, slots=True)
class StatefulSet:
    metadata: ObjectMeta
    selector: LabelSelector | None = None  # spec.selector; None (nil) selects nothing


def parse_replica_set(raw: Mapping[str, Any]) -> ReplicaSet:
    spec = as_mapping(raw.get("spec"), "spec")
    return ReplicaSet(
        parse_namespaced_meta(raw.get("metadata")),
        parse_label_selector(spec.get("selector"), "spec.selector"),
    )


def parse_stateful_set(raw: Mapping[str, Any]) -> StatefulSet:
    spec = as_mapping(raw.get("spec"), "spec")
    return StatefulSet(
        parse_namespaced_meta(raw.get("metadata")),
        parse_label_selector(spec.get("selector"), "spec.selector"),
    )
