"""Binding PV/PVC views in the assume cache: the new versions the binder assumes before its writes."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from kopf_scheduler.api.meta import ObjectMeta

if TYPE_CHECKING:  # api/storage.py is imported with the first storage object; what binds one has it
    from kopf_scheduler.api.storage import PersistentVolume, PersistentVolumeClaim


def with_annotation(meta: ObjectMeta, key: str, value: str) -> ObjectMeta:
    return dataclasses.replace(meta, annotations={**meta.annotations, key: value})


def bind_volume_to_claim(pv: PersistentVolume, pvc: PersistentVolumeClaim) -> tuple[PersistentVolume, bool]:
    """``GetBindVolumeToClaim``: the PV with claimRef set to the claim; and whether it changed."""
    from kopf_scheduler.api.storage import ANN_BOUND_BY_CONTROLLER, ClaimRef

    meta = pvc.metadata
    ref = pv.claim_ref
    bound_already = pv.is_bound_to(pvc)
    new = pv
    if ref is None or (ref.name, ref.namespace, ref.uid) != (meta.name, meta.namespace, meta.uid):
        new = dataclasses.replace(
            new,
            claim_ref=ClaimRef(meta.name, meta.namespace, meta.uid, meta.resource_version),
        )
    if not bound_already and ANN_BOUND_BY_CONTROLLER not in new.metadata.annotations:
        new = dataclasses.replace(new, metadata=with_annotation(new.metadata, ANN_BOUND_BY_CONTROLLER, "yes"))
    return new, new is not pv


def with_selected_node(pvc: PersistentVolumeClaim, node_name: str) -> PersistentVolumeClaim:
    """The claim as the provisioner will see it: annotated with the node chosen."""
    from kopf_scheduler.api.storage import ANN_SELECTED_NODE

    return dataclasses.replace(pvc, metadata=with_annotation(pvc.metadata, ANN_SELECTED_NODE, node_name))
