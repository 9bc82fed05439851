"""The one registry of kinds (api/kinds.py) and the tables every reader derives from it."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from kopf_scheduler import simulate
from kopf_scheduler.api import kinds
from kopf_scheduler.api.meta import ObjectMeta
from kopf_scheduler.api.objects import parse_node, parse_pod
from kopf_scheduler.api.types import ObjectError
from kopf_scheduler.cache.cache import object_key
from kopf_scheduler.cluster import runtime
from kopf_scheduler.framework.events import OBJECT_EVENT_RESOURCES, ActionType, EventResource, object_event


def test_paths_follow_group_version_and_scope() -> None:
    pvc = kinds.by_name("PersistentVolumeClaim")
    assert pvc.path == "/api/v1/persistentvolumeclaims"
    assert pvc.collection("team-a") == "/api/v1/namespaces/team-a/persistentvolumeclaims"
    assert pvc.group_version == "v1"
    group = kinds.by_name("PodGroup")
    assert group.api_path == "/apis/scheduling.k8s.io/v1beta1"
    assert group.collection("team-a") == "/apis/scheduling.k8s.io/v1beta1/namespaces/team-a/podgroups"
    assert group.group_version == "scheduling.k8s.io/v1beta1"
    sc = kinds.by_name("StorageClass")
    assert sc.collection("team-a") == sc.path == "/apis/storage.k8s.io/v1/storageclasses"


def test_every_informed_kind_is_unique_and_served_once() -> None:
    names = [k.kind for k in kinds.KINDS]
    assert len(names) == len(set(names))
    assert len({k.path for k in kinds.KINDS}) == len(kinds.KINDS)


def test_the_operator_informs_the_registry() -> None:
    assert [r.kind for r in runtime.OBJECT_KINDS] == [k.kind for k in kinds.OBJECT_KINDS]
    assert [(p, plural, r.path) for p, plural, r in runtime.OPTIONAL_KINDS] == [
        ("/apis/scheduling.k8s.io/v1beta1", "podgroups", "/apis/scheduling.k8s.io/v1beta1/podgroups")
    ]


def test_cache_and_simulate_key_objects_alike() -> None:
    """A namespaced kind is ``ns/name`` in the live cache and in simulate, PodGroups included."""
    for kind in (*kinds.OBJECT_KINDS, *kinds.OPTIONAL_KINDS):
        raw = {"metadata": {"name": "x", "namespace": "team-a"}}
        want = "team-a/x" if kind.namespaced else "x"
        assert object_key(kind.kind, raw) == kind.key(raw["metadata"]) == want, kind.kind
        assert (kind.kind in simulate.NAMESPACED) is kind.namespaced
        assert kind.kind in simulate.NAMESPACED | simulate.CLUSTER_SCOPED


def test_events_vocabulary_comes_from_the_registry() -> None:
    assert OBJECT_EVENT_RESOURCES["DeviceTaintRule"] is EventResource.RESOURCE_SLICE
    event = object_event("CSINode", ActionType.ADD)
    assert event is not None and event.label == "storage.k8s.io/CSINodeAdd"
    assert object_event("Namespace", ActionType.ADD) is None
    heard = {k.kind for k in kinds.KINDS if k.role is kinds.Role.OBJECT and k.event}
    assert set(OBJECT_EVENT_RESOURCES) == heard


def test_the_live_listing_does_not_load_the_operator() -> None:
    """``explain NS/POD`` lists the cluster through cluster/listing.py, which reads the registry, not
    the operator's runtime (informers, peering) nor its Kopf handlers; Kopf itself is not loaded
    either (the credentials are ours: cluster/connection.py's ConnectionInfo)."""
    code = (
        "import json, sys, kopf_scheduler.cluster.listing\n"
        "print(json.dumps([m for m in sys.modules if m.startswith(('kopf_scheduler.cluster.', 'kopf'))]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(json.loads(out))
    assert "kopf_scheduler.cluster.listing" in loaded
    edge = {
        "kopf_scheduler.cluster.operator",
        "kopf_scheduler.cluster.runtime",
        "kopf_scheduler.cluster.leader",
    }
    assert not loaded & edge
    assert "kopf" not in loaded


def test_views_keyed_like_their_raw_objects() -> None:
    """A typed view is keyed by its parsed metadata exactly as its raw dict is (cache, simulate)."""
    from kopf_scheduler.api.meta import parse_meta

    @dataclasses.dataclass(frozen=True)
    class View:
        metadata: ObjectMeta

    for kind, raw_meta, want in (
        (kinds.PERSISTENT_VOLUME_CLAIM, {"name": "c", "namespace": "ns"}, "ns/c"),
        (kinds.PERSISTENT_VOLUME_CLAIM, {"name": "c"}, "default/c"),
        (kinds.STORAGE_CLASS, {"name": "fast", "namespace": "ignored"}, "fast"),
    ):
        view = View(parse_meta(raw_meta))
        assert kind.key_of(view) == kind.key_of({"metadata": raw_meta}) == want


def test_parse_meta_reads_owners_and_deletion() -> None:
    from kopf_scheduler.api.meta import parse_meta

    meta = parse_meta(
        {
            "name": "rs-1",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "7",
            "generation": "3",
            "labels": {"a": "b"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "u0", "controller": True}
            ],
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        }
    )
    assert (meta.generation, meta.resource_version, dict(meta.labels)) == (3, "7", {"a": "b"})
    controller = meta.controller()
    assert controller is not None and (controller.kind, controller.uid) == ("Deployment", "u0")
    assert meta.deleting
    assert not parse_meta({"name": "x"}).deleting
    with pytest.raises(ObjectError, match=r"metadata\.labels\.a"):
        parse_meta({"name": "x", "labels": {"a": 1}})


def test_objects_of_reads_one_kind() -> None:
    objects = {"StorageClass": {"fast": {"metadata": {"name": "fast"}}}}
    assert dict(kinds.objects_of(objects, kinds.STORAGE_CLASS)) == objects["StorageClass"]
    assert dict(kinds.objects_of(objects, kinds.CSI_NODE)) == {}


def test_every_kind_the_scheduler_reads_has_its_parser() -> None:
    """Only the workbench's kinds are stored raw: the scheduler's are typed at the edge."""
    untyped = sorted(k.kind for k in kinds.KINDS if not k.typed)
    workbench = sorted(k.kind for k in kinds.KINDS if k.role is kinds.Role.WORKBENCH)
    assert untyped == workbench
    assert kinds.POD.parse is parse_pod and kinds.NODE.parse is parse_node
