"""A pod's volumes (core/v1 ``Volume``), parsed once into what the volume plugins read.

Each volume names one source (the ``VolumeSource`` member that is set). The plugins read few of
them: the claim a ``persistentVolumeClaim`` or generic ``ephemeral`` volume uses, the in-tree disks
VolumeRestrictions and NodeVolumeLimits compare (as a PersistentVolume names them: api/storage.py),
an inline CSI driver, an image volume's reference; and the signature of the whole source (the
reference's ``VolumesSigner`` marshals every source but ConfigMaps and Secrets).

The hot path is the informer parsing every pod: most volumes are the same few sources in every pod
of a template (the service account's projected ``kube-api-access-*`` volume, emptyDirs, ephemeral
claim templates) under a per-pod name. A bound pod (most of what an informer parses) is never
signed: its sources without typed fields are one shared VolumeSource per kind, their content never
looked at. A pod still to schedule shares each source's parsed form and signature with the last
pods whose source content was equal. A ``persistentVolumeClaim`` source is a claim name and a flag,
parsed inline with no signature to compute.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.api.types import ObjectError, as_list, as_mapping

__all__ = [
    "CONFIG_MAP",
    "CSI",
    "EPHEMERAL",
    "IMAGE",
    "IN_TREE_VOLUME_ID",
    "ISCSI",
    "PERSISTENT_VOLUME_CLAIM",
    "RBD",
    "SECRET",
    "InTreeVolumeSource",
    "PodVolume",
    "RBDVolumeSource",
    "VolumeSource",
    "parse_volumes",
]

# VolumeSource members the plugins or the signer tell apart (the others only carry their kind).
PERSISTENT_VOLUME_CLAIM = "persistentVolumeClaim"
EPHEMERAL = "ephemeral"
CONFIG_MAP = "configMap"
SECRET = "secret"
CSI = "csi"
IMAGE = "image"
ISCSI = "iscsi"
RBD = "rbd"

# In-tree PV sources the CSI translation library migrates, with the field naming the disk (a pod's
# inline volume and a PersistentVolume (api/storage.py) name their disk the same way).
IN_TREE_VOLUME_ID = {
    "awsElasticBlockStore": "volumeID",
    "gcePersistentDisk": "pdName",
    "azureDisk": "diskURI",
    "cinder": "volumeID",
    "portworxVolume": "volumeID",
}


@dataclass(frozen=True, slots=True)
class InTreeVolumeSource:
    """An in-tree source CSI migration translates: its field in the spec and the disk it names."""

    source: str  # awsElasticBlockStore | gcePersistentDisk | azureDisk | cinder | portworxVolume
    volume_id: str  # volumeID / pdName / diskURI


@dataclass(frozen=True, slots=True)
class RBDVolumeSource:
    """The RBD image a volume maps: VolumeRestrictions' conflict test reads these three."""

    monitors: tuple[str, ...] = ()
    pool: str = "rbd"  # the apiserver's default
    image: str = ""


@dataclass(frozen=True, slots=True)
class VolumeSource:
    """What the plugins read of a volume's source; shared by the volumes with equal sources.

    ``content`` is the source as the reference's ``VolumesSigner`` marshals it (``{kind: source}``,
    keys sorted), for the pods the scheduler signs (those not bound yet, see ``parse_volumes``).
    It is None for the others, for ConfigMaps and Secrets, which the signer leaves out, and for a
    ``persistentVolumeClaim``, which is signed by its typed fields (its claim name is per pod).
    """

    kind: str  # the member set: "persistentVolumeClaim", "projected", "csi", ...; "" for none
    read_only: bool = False  # readOnly of a claim, in-tree disk, iSCSI, RBD or CSI source
    in_tree: InTreeVolumeSource | None = None  # awsElasticBlockStore, gcePersistentDisk, azureDisk...
    iscsi_iqn: str = ""
    rbd: RBDVolumeSource | None = None
    csi_driver: str = ""  # an inline CSI volume's driver
    image_reference: str = ""  # an image volume's reference (ImageVolume)
    content: str | None = None


@dataclass(frozen=True, slots=True)
class PodVolume:
    """One entry of ``spec.volumes``."""

    name: str
    source: VolumeSource
    # The claim the volume uses: persistentVolumeClaim.claimName, or the <pod>-<volume> claim the
    # ephemeral volume controller makes for a generic ephemeral volume (``ephemeral.VolumeClaimName``).
    claim_name: str | None = None

    @property
    def ephemeral(self) -> bool:
        return self.source.kind == EPHEMERAL


_CLAIM_SOURCES = {
    False: VolumeSource(PERSISTENT_VOLUME_CLAIM),
    True: VolumeSource(PERSISTENT_VOLUME_CLAIM, True),
}
_CONFIG_MAP, _SECRET = VolumeSource(CONFIG_MAP), VolumeSource(SECRET)  # never signed
# Sources that are the same for every volume of their kind; _UNSIGNED learns the untyped kinds.
_SIGNED = {"": VolumeSource("", content="{}"), CONFIG_MAP: _CONFIG_MAP, SECRET: _SECRET}
_UNSIGNED = {"": VolumeSource(""), CONFIG_MAP: _CONFIG_MAP, SECRET: _SECRET}
_KINDS_LIMIT = 64  # VolumeSource has 30 members; keys beyond (malformed input) are not kept
# The members with typed fields (the others are read by kind only).
_TYPED = frozenset((*IN_TREE_VOLUME_ID, ISCSI, RBD, CSI, IMAGE))


def _kind_only(kind: str) -> VolumeSource:
    source = VolumeSource(kind)
    if len(_UNSIGNED) < _KINDS_LIMIT:
        _UNSIGNED[kind] = source
    return source


def _read_only(value: Any, path: str) -> bool:
    if value is None:
        return False
    if type(value) is not bool:
        raise ObjectError(path, f"expected a boolean, got {type(value).__name__}")
    return value


def _parse_source(kind: str, raw: Any, i: int, signed: bool) -> VolumeSource:
    """A source other than a claim, a ConfigMap or a Secret (with its signature when ``signed``)."""
    path = f"spec.volumes[{i}].{kind}"
    value = as_mapping(raw, path)
    if kind not in _TYPED:
        content = json.dumps({kind: raw}, sort_keys=True, default=str) if signed else None
        return VolumeSource(kind, content=content)
    read_only = _read_only(value.get("readOnly"), f"{path}.readOnly")
    in_tree = None
    iscsi_iqn = csi_driver = image_reference = ""
    rbd = None
    id_field = IN_TREE_VOLUME_ID.get(kind)
    if id_field is not None:
        in_tree = InTreeVolumeSource(kind, str(value.get(id_field) or ""))
    elif kind == ISCSI:
        iscsi_iqn = str(value.get("iqn") or "")
    elif kind == RBD:
        monitors = tuple(str(m) for m in as_list(value.get("monitors"), f"{path}.monitors"))
        rbd = RBDVolumeSource(monitors, str(value.get("pool") or "rbd"), str(value.get("image") or ""))
    elif kind == CSI:
        csi_driver = str(value.get("driver") or "")
    elif kind == IMAGE:
        image_reference = str(value.get("reference") or "")
    content = json.dumps({kind: raw}, sort_keys=True, default=str) if signed else None
    return VolumeSource(kind, read_only, in_tree, iscsi_iqn, rbd, csi_driver, image_reference, content)


# Signed sources seen last, per kind, each with a private copy of its content to compare with:
# ``==`` on dicts runs in C (a few hundred ns for the service account's projected volume once in
# cache) where freezing it into a key or marshalling it takes microseconds. ``==`` equates 1, 1.0
# and True, which an apiserver's JSON never mixes in one field; a miss parses the plain way.
_SHARED_LIMIT = 8
_SHARED: dict[str, list[tuple[Any, VolumeSource]]] = {}


def _shared_source(kind: str, raw: dict[str, Any], i: int) -> VolumeSource:
    """A signed source none of the last seen of its kind equals (the caller looked): parsed, kept."""
    source = _parse_source(kind, raw, i, True)
    seen = _SHARED.get(kind)
    if seen is None:
        if len(_SHARED) >= _KINDS_LIMIT:
            return source
        seen = _SHARED[kind] = []
    assert source.content is not None
    # Decoded from the signature: the pod's own dict is the caller's and may change later.
    seen.insert(0, (json.loads(source.content)[kind], source))
    del seen[_SHARED_LIMIT:]
    return source


def parse_volumes(raw: Any, pod_name: str, *, signed: bool, memo: bool = True) -> tuple[PodVolume, ...]:
    """``spec.volumes``; raises ObjectError naming the first malformed field (``spec.volumes[i]...``).

    ``signed``: give the sources their ``content`` (the signer's). The scheduler signs only the pods
    it schedules; comparing a source's content costs more than the rest of its volume's parse, so a
    pod already bound (most of what an informer parses) goes without. ``memo``: share the signed
    sources with earlier pods' (``_SHARED``); the plain parse builds equal ones. Paths are
    formatted only for an error: this runs for every pod the informer sees."""
    if raw is None:
        return ()
    items: Sequence[Any] = as_list(raw, "spec.volumes")
    out = []
    for i, item in enumerate(items):
        if type(item) is not dict:
            item = as_mapping(item, f"spec.volumes[{i}]")
        kind = ""
        value: Any = None
        for key, val in item.items():
            if key == "name" or val is None:
                continue
            if kind:
                raise ObjectError(f"spec.volumes[{i}]", "may not specify more than 1 volume type")
            kind, value = key, val
        name = item.get("name")
        if type(name) is not str:
            name = str(name or "")
        if kind == PERSISTENT_VOLUME_CLAIM:
            if type(value) is not dict:
                value = as_mapping(value, f"spec.volumes[{i}].{kind}")
            read_only = value.get("readOnly")
            if read_only is not None and type(read_only) is not bool:
                read_only = _read_only(read_only, f"spec.volumes[{i}].{kind}.readOnly")
            claim_name = value.get("claimName")
            out.append(
                PodVolume(
                    name,
                    _CLAIM_SOURCES[read_only is True],
                    claim_name if type(claim_name) is str else str(claim_name or ""),
                )
            )
            continue
        if kind and type(value) is not dict:
            as_mapping(value, f"spec.volumes[{i}].{kind}")  # raises unless another Mapping
        source = (_SIGNED if signed else _UNSIGNED).get(kind)
        if source is None:
            if not signed:
                source = _parse_source(kind, value, i, False) if kind in _TYPED else _kind_only(kind)
            elif memo and type(value) is dict:
                for content, shared in _SHARED.get(kind, ()):
                    if content == value:
                        source = shared
                        break
                else:
                    source = _shared_source(kind, value, i)
            else:
                source = _parse_source(kind, value, i, True)
        out.append(PodVolume(name, source, f"{pod_name}-{name}" if kind == EPHEMERAL else None))
    return tuple(out)
