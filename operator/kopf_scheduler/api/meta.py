"""ObjectMeta, parsed once: what every typed view of a kind carries as ``metadata``.

The typed views of the kinds the plugins read (storage, DRA, policy, workloads...) are frozen
dataclasses parsed at the edge (the informers, simulate's loader), like Pod and Node; their common
part is this, so that keys, owner checks and label selection read the same fields everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kopf_scheduler.api.types import ObjectError, as_int, as_list, as_mapping, as_str_map, parse_timestamp

__all__ = ["ObjectMeta", "OwnerReference", "parse_meta", "parse_namespaced_meta", "parse_owner_references"]

_NO_STRINGS: Mapping[str, str] = {}


@dataclass(frozen=True, slots=True)
class OwnerReference:
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    name: str
    namespace: str = ""  # "" for a cluster-scoped object
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS)
    annotations: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS)
    owner_references: tuple[OwnerReference, ...] = ()
    creation_timestamp: float = 0.0
    deletion_timestamp: float | None = None  # set once the object is being deleted

    @property
    def deleting(self) -> bool:
        return self.deletion_timestamp is not None

    def controller(self) -> OwnerReference | None:
        """The controlling owner (``metav1.GetControllerOf``)."""
        return next((r for r in self.owner_references if r.controller), None)


def parse_owner_references(raw: Any, path: str = "metadata.ownerReferences") -> tuple[OwnerReference, ...]:
    """``metadata.ownerReferences`` (the Pod parser's too, whose metadata is not an ObjectMeta).

    A plain loop: every pod a controller made has one, so this is on the pod parser's hot path.
    """
    if not raw:
        return ()
    out = []
    for i, ref in enumerate(as_list(raw, path)):
        if not isinstance(ref, Mapping):
            raise ObjectError(f"{path}[{i}]", f"expected an object, got {type(ref).__name__}")
        out.append(
            OwnerReference(
                str(ref.get("apiVersion") or ""),
                str(ref.get("kind") or ""),
                str(ref.get("name") or ""),
                str(ref.get("uid") or ""),
                ref.get("controller") is True,
            )
        )
    return tuple(out)


def parse_meta(raw: Any, path: str = "metadata") -> ObjectMeta:
    """``metadata`` of any object; an ObjectError names the offending field."""
    meta = as_mapping(raw, path)
    owners = parse_owner_references(meta.get("ownerReferences"), f"{path}.ownerReferences")
    deletion = meta.get("deletionTimestamp")
    return ObjectMeta(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        generation=as_int(meta.get("generation"), f"{path}.generation"),
        labels=as_str_map(meta.get("labels"), f"{path}.labels") or _NO_STRINGS,
        annotations=as_str_map(meta.get("annotations"), f"{path}.annotations") or _NO_STRINGS,
        owner_references=owners,
        creation_timestamp=parse_timestamp(meta.get("creationTimestamp"), f"{path}.creationTimestamp"),
        deletion_timestamp=(
            parse_timestamp(deletion, f"{path}.deletionTimestamp") if deletion is not None else None
        ),
    )


def parse_namespaced_meta(raw: Any, path: str = "metadata") -> ObjectMeta:
    """``metadata`` of a namespaced kind: no namespace is ``default``, as the apiserver (and the
    Pod parser, and ``Kind.key_of``) would have it, so that views compare with pods by namespace."""
    meta = parse_meta(raw, path)
    return meta if meta.namespace else replace(meta, namespace="default")
