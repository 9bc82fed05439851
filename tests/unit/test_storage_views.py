"""Typed views of the storage kinds (api/storage.py): what the volume plugins read, parsed once."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from kopf_scheduler.api import kinds
from kopf_scheduler.api.storage import (
    ClaimRef,
    CSIVolumeSource,
    parse_csi_driver,
    parse_csi_node,
    parse_csi_storage_capacity,
    parse_persistent_volume,
    parse_persistent_volume_claim,
    parse_storage_class,
    parse_volume_attachment,
)
from kopf_scheduler.api.types import ObjectError
from kopf_scheduler.api.volumes import InTreeVolumeSource


def test_claim_view() -> None:
    claim = parse_persistent_volume_claim(
        {
            "metadata": {
                "name": "data",
                "namespace": "ns",
                "uid": "u1",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
            },
            "spec": {
                "storageClassName": "spec-class",
                "volumeName": "pv-1",
                "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                "resources": {"requests": {"storage": "1500Mi"}},
                "selector": {"matchLabels": {"tier": "gold"}},
            },
            "status": {"phase": "Bound"},
        }
    )
    assert (claim.key, claim.class_name, claim.volume_name, claim.phase) == (
        "ns/data",
        "spec-class",
        "pv-1",
        "Bound",
    )
    assert claim.access_modes == {"ReadWriteOnce", "ReadOnlyMany"} and claim.volume_mode == "Filesystem"
    assert claim.storage_request == Fraction(1500 * 2**20) and claim.is_fully_bound
    assert claim.selector is not None and claim.selector.matches({"tier": "gold"})
    assert not claim.selector.matches({"tier": "bronze"})
    bare = parse_persistent_volume_claim({"metadata": {"name": "c"}})
    assert (bare.key, bare.storage_request, bare.requested_storage, bare.selector) == (
        "default/c",
        None,
        0,
        None,
    )
    assert not bare.is_fully_bound


def test_the_beta_annotation_names_the_class() -> None:
    meta = {"name": "x", "annotations": {"volume.beta.kubernetes.io/storage-class": "beta"}}
    spec = {"storageClassName": "ga"}
    assert parse_persistent_volume_claim({"metadata": meta, "spec": spec}).class_name == "beta"
    assert parse_persistent_volume({"metadata": meta, "spec": spec}).class_name == "beta"


def test_volume_view() -> None:
    pv = parse_persistent_volume(
        {
            "metadata": {"name": "pv-1", "labels": {"topology.kubernetes.io/zone": "a"}},
            "spec": {
                "storageClassName": "fast",
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Block",
                "claimRef": {"name": "data", "namespace": "ns", "uid": "u1"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                        ]
                    }
                },
                "csi": {"driver": "csi.example.com", "volumeHandle": "h1"},
            },
            "status": {"phase": "Bound"},
        }
    )
    assert (pv.class_name, pv.capacity, pv.volume_mode, pv.phase) == ("fast", 10 * 2**30, "Block", "Bound")
    assert pv.claim_ref == ClaimRef("data", "ns", "u1")
    assert pv.csi == CSIVolumeSource("csi.example.com", "h1") and pv.in_tree is None
    assert pv.matches_node("n1", {"zone": "a"}) and not pv.matches_node("n1", {"zone": "b"})
    claim = parse_persistent_volume_claim({"metadata": {"name": "data", "namespace": "ns", "uid": "u1"}})
    other = parse_persistent_volume_claim({"metadata": {"name": "data", "namespace": "ns", "uid": "u2"}})
    assert pv.is_bound_to(claim) and not pv.is_bound_to(other)
    bare = parse_persistent_volume(
        {"metadata": {"name": "pv-2"}, "spec": {"gcePersistentDisk": {"pdName": "d"}}}
    )
    assert bare.matches_node("any", {}) and bare.claim_ref is None and bare.capacity == 0
    assert bare.in_tree == InTreeVolumeSource("gcePersistentDisk", "d")


def test_storage_class_topology() -> None:
    sc = parse_storage_class(
        {
            "metadata": {"name": "zoned"},
            "provisioner": "csi.example.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "zone", "values": ["a", "b"]}]}],
        }
    )
    assert (sc.provisioner, sc.volume_binding_mode) == ("csi.example.com", "WaitForFirstConsumer")
    assert sc.allows_topology({"zone": "b"}) and not sc.allows_topology({"zone": "c"})
    assert parse_storage_class({"metadata": {"name": "any"}}).allows_topology({})
    # A term without requirements allows no node.
    assert not parse_storage_class({"metadata": {"name": "x"}, "allowedTopologies": [{}]}).allows_topology({})


def test_csi_kinds() -> None:
    node = parse_csi_node(
        {
            "metadata": {"name": "n1"},
            "spec": {
                "drivers": [{"name": "d1", "nodeID": "n1", "allocatable": {"count": 3}}, {"name": "d2"}]
            },
        }
    )
    assert [(d.name, d.allocatable_count) for d in node.drivers] == [("d1", 3), ("d2", None)]
    driver = parse_csi_driver({"metadata": {"name": "d1"}, "spec": {"storageCapacity": True}})
    assert driver.storage_capacity and not driver.prevent_pod_scheduling_if_missing
    va = parse_volume_attachment(
        {
            "metadata": {"name": "va"},
            "spec": {"attacher": "d1", "nodeName": "n1", "source": {"persistentVolumeName": "pv"}},
        }
    )
    assert (va.attacher, va.node_name, va.persistent_volume_name) == ("d1", "n1", "pv")
    capacity = parse_csi_storage_capacity(
        {
            "metadata": {"name": "c", "namespace": "kube-system"},
            "storageClassName": "fast",
            "capacity": "10Gi",
            "nodeTopology": {"matchLabels": {"zone": "a"}},
        }
    )
    assert capacity.volume_limit == 10 * 2**30 and capacity.node_topology is not None
    with_max = parse_csi_storage_capacity(
        {"metadata": {"name": "c"}, "capacity": "10Gi", "maximumVolumeSize": "1Gi"}
    )
    assert with_max.volume_limit == 2**30 and with_max.node_topology is None


@pytest.mark.parametrize(
    ("kind", "raw", "field"),
    [
        (
            kinds.PERSISTENT_VOLUME_CLAIM,
            {"spec": {"resources": {"requests": {"storage": "lots"}}}},
            r"spec\.resources\.requests\.storage",
        ),
        (kinds.PERSISTENT_VOLUME_CLAIM, {"spec": {"accessModes": "ReadWriteOnce"}}, r"spec\.accessModes"),
        (
            kinds.PERSISTENT_VOLUME_CLAIM,
            {"spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}}},
            r"spec\.selector\.matchExpressions\[0\]\.operator",
        ),
        (
            kinds.PERSISTENT_VOLUME_CLAIM,
            {"metadata": {"name": "c", "annotations": {"a": 1}}},
            r"metadata\.annotations\.a",
        ),
        (kinds.PERSISTENT_VOLUME, {"spec": {"capacity": {"storage": []}}}, r"spec\.capacity\.storage"),
        (kinds.PERSISTENT_VOLUME, {"spec": {"claimRef": "ns/c"}}, r"spec\.claimRef"),
        (
            kinds.PERSISTENT_VOLUME,
            {"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": {}}}}},
            r"spec\.nodeAffinity\.required\.nodeSelectorTerms",
        ),
        (kinds.PERSISTENT_VOLUME, {"spec": {"csi": "driver"}}, r"spec\.csi"),
        (
            kinds.STORAGE_CLASS,
            {"allowedTopologies": [{"matchLabelExpressions": [{"key": "z", "values": "a"}]}]},
            r"allowedTopologies\[0\]\.matchLabelExpressions\[0\]\.values",
        ),
        (
            kinds.CSI_NODE,
            {"spec": {"drivers": [{"name": "d", "allocatable": {"count": "many"}}]}},
            r"spec\.drivers\[0\]\.allocatable\.count",
        ),
        (kinds.CSI_DRIVER, {"spec": {"storageCapacity": "yes"}}, r"spec\.storageCapacity"),
        (kinds.VOLUME_ATTACHMENT, {"spec": {"source": ["pv"]}}, r"spec\.source"),
        (kinds.CSI_STORAGE_CAPACITY, {"capacity": "10 Gi"}, r"^capacity"),
        (kinds.CSI_STORAGE_CAPACITY, {"nodeTopology": {"matchLabels": ["a"]}}, r"nodeTopology\.matchLabels"),
    ],
)
def test_a_malformed_object_names_its_field(kind: kinds.Kind[Any], raw: dict[str, Any], field: str) -> None:
    """Through the kind's registered parser, as the informers and simulate call it."""
    with pytest.raises(ObjectError, match=field):
        kind.parse({"metadata": {"name": "x"}, **raw})


def test_the_registered_parsers_make_views() -> None:
    for kind in (
        kinds.PERSISTENT_VOLUME_CLAIM,
        kinds.PERSISTENT_VOLUME,
        kinds.STORAGE_CLASS,
        kinds.CSI_NODE,
        kinds.CSI_DRIVER,
        kinds.VOLUME_ATTACHMENT,
        kinds.CSI_STORAGE_CAPACITY,
    ):
        view = kind.parse({"metadata": {"name": "x", "namespace": "ns"}})
        assert type(view).__name__ == kind.kind
        assert kind.key_of(view) == ("ns/x" if kind.namespaced else "x")
