"""The control plane is real: objects persist in etcd and pods/binding sets spec.nodeName."""

from __future__ import annotations

import json
import subprocess
import uuid

import kubernetes
import pytest

from kopf_scheduler_workbench.controlplane import ControlPlane

pytestmark = pytest.mark.integration


@pytest.fixture
def core(control_plane: ControlPlane) -> kubernetes.client.CoreV1Api:
    api_client = kubernetes.config.new_client_from_config(str(control_plane.kubeconfig))
    return kubernetes.client.CoreV1Api(api_client)


def test_binding_sets_node_name(control_plane: ControlPlane, core: kubernetes.client.CoreV1Api) -> None:
    suffix = uuid.uuid4().hex[:6]
    node = f"smoke-node-{suffix}"
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node},
            "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        }
    )
    core.create_namespaced_pod(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"smoke-{suffix}"},
            "spec": {
                "schedulerName": "kopf-scheduler",
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            },
        },
    )
    pending = core.read_namespaced_pod(f"smoke-{suffix}", "default")
    assert pending.spec.node_name is None
    assert pending.spec.scheduler_name == "kopf-scheduler"

    body = kubernetes.client.V1Binding(
        metadata=kubernetes.client.V1ObjectMeta(name=f"smoke-{suffix}"),
        target=kubernetes.client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )
    # The generated client cannot decode the Status the subresource returns; the POST is what counts.
    core.create_namespaced_binding("default", body, _preload_content=False)
    assert core.read_namespaced_pod(f"smoke-{suffix}", "default").spec.node_name == node

    # A second binding is refused with 409 Conflict: the apiserver never binds a pod twice.
    with pytest.raises(kubernetes.client.ApiException) as info:
        core.create_namespaced_binding("default", body, _preload_content=False)
    assert info.value.status == 409


def test_rbac_is_enforced(control_plane: ControlPlane) -> None:
    kubeconfig = control_plane.service_account_kubeconfig("smoke-rbac", "nobody")
    with pytest.raises(subprocess.CalledProcessError) as info:
        control_plane.kubectl("get", "pods", "-A", "-o", "json", kubeconfig=kubeconfig)
    assert "forbidden" in info.value.stderr
    listing = json.loads(control_plane.kubectl("get", "nodes", "-o", "json"))
    assert listing["kind"] == "List"
