"""A pod's volumes parse once into typed PodVolumes (api/volumes.py): the sources the volume
plugins read, the claim each volume uses, the signer's content; malformed ones are named."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from kopf_scheduler.api import objects
from kopf_scheduler.api.objects import Pod, parse_pod
from kopf_scheduler.api.types import ObjectError
from kopf_scheduler.api.volumes import InTreeVolumeSource, RBDVolumeSource, VolumeSource, parse_volumes
from kopf_scheduler.framework import signers
from kopf_scheduler_workbench.testing.builders import pod_dict

SA_VOLUME: dict[str, Any] = {
    "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        ],
    }
}


def _pod(name: str, volumes: list[dict[str, Any]], node_name: str = "") -> dict[str, Any]:
    return pod_dict(name, node_name=node_name, volumes=copy.deepcopy(volumes))


def _fields(pod: Pod) -> dict[str, Any]:
    return {f.name: getattr(pod, f.name) for f in dataclasses.fields(pod) if f.name != "raw"}


def test_sources_the_plugins_read_are_typed() -> None:
    pod = parse_pod(
        _pod(
            "web-0",
            [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0", "readOnly": True}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["RWO"]}}}},
                {"name": "pd", "gcePersistentDisk": {"pdName": "disk-1", "readOnly": True}},
                {"name": "ebs", "awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-1"}},
                {"name": "az", "azureDisk": {"diskName": "d", "diskURI": "uri-1"}},
                {"name": "rbd", "rbd": {"monitors": ["m1", "m2"], "image": "img"}},
                {"name": "iscsi", "iscsi": {"targetPortal": "p:3260", "iqn": "iqn.1", "lun": 0}},
                {"name": "inline", "csi": {"driver": "csi.example.com", "readOnly": False}},
                {"name": "img", "image": {"reference": "registry/model:1"}},
                {"name": "cm", "configMap": {"name": "conf"}},
                {"name": "tmp", "emptyDir": {}},
            ],
        )
    )
    by_name = {v.name: v for v in pod.volumes}
    assert [v.name for v in pod.volumes] == list(by_name)  # spec order kept
    data = by_name["data"]
    assert (data.claim_name, data.ephemeral, data.source.read_only) == ("data-web-0", False, True)
    scratch = by_name["scratch"]
    assert (scratch.claim_name, scratch.ephemeral) == ("web-0-scratch", True)  # the controller's name
    assert by_name["pd"].source.in_tree == InTreeVolumeSource("gcePersistentDisk", "disk-1")
    assert by_name["pd"].source.read_only
    assert by_name["ebs"].source.in_tree == InTreeVolumeSource(
        "awsElasticBlockStore", "aws://us-east-1a/vol-1"
    )
    assert by_name["az"].source.in_tree == InTreeVolumeSource("azureDisk", "uri-1")
    assert by_name["rbd"].source.rbd == RBDVolumeSource(("m1", "m2"), "rbd", "img")  # the default pool
    assert by_name["iscsi"].source.iscsi_iqn == "iqn.1"
    assert by_name["inline"].source.csi_driver == "csi.example.com"
    assert by_name["img"].source.image_reference == "registry/model:1"
    assert by_name["cm"].source.kind == "configMap" and by_name["cm"].claim_name is None
    assert by_name["tmp"].source == VolumeSource("emptyDir", content='{"emptyDir": {}}')


@pytest.mark.parametrize(
    ("volumes", "path"),
    [
        ({"name": "x"}, "spec.volumes"),
        (["not a volume"], "spec.volumes[0]"),
        (
            [{"name": "a", "emptyDir": {}}, {"name": "b", "persistentVolumeClaim": "data"}],
            "spec.volumes[1].persistentVolumeClaim",
        ),
        (
            [{"name": "a", "persistentVolumeClaim": {"claimName": "c", "readOnly": "yes"}}],
            "spec.volumes[0].persistentVolumeClaim.readOnly",
        ),
        (
            [{"name": "a", "gcePersistentDisk": {"pdName": "d", "readOnly": 1}}],
            "spec.volumes[0].gcePersistentDisk.readOnly",
        ),
        ([{"name": "a", "rbd": {"monitors": "m1", "image": "i"}}], "spec.volumes[0].rbd.monitors"),
        ([{"name": "a", "hostPath": ["/data"]}], "spec.volumes[0].hostPath"),
        ([{"name": "a", "emptyDir": {}, "hostPath": {"path": "/data"}}], "spec.volumes[0]"),
    ],
)
@pytest.mark.parametrize("node_name", ["", "node-1"])  # signed (pending) and unsigned (bound)
def test_malformed_volume_is_named(volumes: Any, path: str, node_name: str) -> None:
    raw = pod_dict("p", node_name=node_name, volumes=volumes)
    with pytest.raises(ObjectError) as err:
        parse_pod(raw)
    assert err.value.path == path
    with pytest.raises(ObjectError) as plain:
        objects._parse_pod(raw, memo=False)
    assert plain.value.path == path


def test_memoised_sources_equal_plain_parse_and_are_shared() -> None:
    volumes = [{"name": "kube-api-access-x1", **SA_VOLUME}, {"name": "tmp", "emptyDir": {"medium": "Memory"}}]
    raw = _pod("a", volumes)
    a, b = parse_pod(raw), parse_pod(_pod("b", volumes))
    assert _fields(a) == _fields(objects._parse_pod(raw, memo=False))
    assert a.volumes[0].source is b.volumes[0].source  # one parsed source for every pod of the template
    assert (
        a.volumes[0].source.content is not None and '"expirationSeconds": 3607' in a.volumes[0].source.content
    )


def test_memo_keeps_its_own_copy_of_a_source() -> None:
    """A pod's dict changed after its parse does not change what an equal later source parses to."""
    raw = _pod("a", [{"name": "v", "hostPath": {"path": "/one"}}])
    first = parse_pod(raw)
    raw["spec"]["volumes"][0]["hostPath"]["path"] = "/two"
    again = parse_pod(_pod("b", [{"name": "v", "hostPath": {"path": "/one"}}]))
    assert again.volumes[0].source is first.volumes[0].source
    assert parse_pod(raw).volumes[0].source.content == '{"hostPath": {"path": "/two"}}'


def test_bound_pod_volumes_carry_no_signature_content() -> None:
    """Only pods still to schedule are signed: a bound pod's sources skip the content."""
    volumes = [
        {"name": "kube-api-access-x1", **SA_VOLUME},
        {"name": "pd", "gcePersistentDisk": {"pdName": "d"}},
    ]
    bound = parse_pod(_pod("a", volumes, node_name="node-1"))
    assert [v.source.content for v in bound.volumes] == [None, None]
    assert bound.volumes[1].source.in_tree == InTreeVolumeSource("gcePersistentDisk", "d")
    assert (
        parse_volumes(volumes, "a", signed=True)[1].source.content == '{"gcePersistentDisk": {"pdName": "d"}}'
    )


def _signature(volumes: list[dict[str, Any]], name: str = "p") -> Any:
    return signers.volumes(parse_pod(_pod(name, volumes)))


def test_volumes_signature_is_by_content() -> None:
    base: list[dict[str, Any]] = [
        {"name": "kube-api-access-aaaaa", **SA_VOLUME},
        {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}},
        {"name": "cm", "configMap": {"name": "conf-1"}},
    ]
    same = [  # other names, order, ConfigMap and Secret: the same signature
        {"name": "claim", "persistentVolumeClaim": {"claimName": "shared"}},
        {"name": "kube-api-access-bbbbb", **SA_VOLUME},
        {"name": "s", "secret": {"secretName": "token"}},
    ]
    assert _signature(base, "a") == _signature(same, "b")
    other_claim = [base[0], {"name": "data", "persistentVolumeClaim": {"claimName": "other"}}]
    read_only = [
        base[0],
        {"name": "data", "persistentVolumeClaim": {"claimName": "shared", "readOnly": True}},
    ]
    token = copy.deepcopy(base[:2])
    token[0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] = 600
    signatures = {_signature(v) for v in (base, other_claim, read_only, token, base[1:])}
    assert len(signatures) == 5
    assert hash(_signature(base)) == hash(_signature(same))
