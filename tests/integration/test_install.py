"""Installing as a new user would: `kubectl apply -k`, `kubectl explain`, and an exec-plugin kubeconfig.

The exec plugin stands in for what EKS, GKE and AKS hand out: a kubeconfig whose user runs a command
printing an ``ExecCredential`` with an expiry. Its tokens are the manifests' ServiceAccount's, each
bound to a Secret, so deleting the Secret revokes exactly that token: a client that kept using a
token past its expiry, or after a 401, would fail visibly here.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.connection import EXPIRY_MARGIN_SECONDS, load_credentials
from kopf_scheduler_workbench.controlplane import ControlPlane
from kopf_scheduler_workbench.testing.exec_credential import ExecPlugin

from .test_operator_helpers import (
    ROOT,
    create,
    deploy,
    fresh_namespace,
    get_json,
    leading_replica,
    node,
    node_of,
    pod,
    wait_for,
)

pytestmark = pytest.mark.integration

SA_NAMESPACE = "kopf-scheduler"


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane) -> Path:
    return deploy(control_plane)


def test_apply_k_installs_what_apply_f_does(control_plane: ControlPlane, installed: Path) -> None:
    rendered = control_plane.kubectl("kustomize", str(ROOT))
    kinds = sorted(
        (d["kind"], d["metadata"]["name"]) for d in map(json.loads, _yaml_docs_as_json(rendered)) if d
    )
    expected = sorted(
        (d["kind"], d["metadata"]["name"])
        for path in [*sorted((ROOT / "crds").glob("*.yaml")), *sorted((ROOT / "manifests").glob("*.yaml"))]
        for d in map(json.loads, _yaml_docs_as_json(path.read_text()))
        if d
    )
    assert kinds == expected
    out = control_plane.kubectl("apply", "-k", str(ROOT))
    assert "deployment.apps/kopf-scheduler" in out
    assert "customresourcedefinition.apiextensions.k8s.io/schedulerprofiles.kopfscheduler.io" in out


def _yaml_docs_as_json(text: str) -> list[str]:
    import yaml

    return [json.dumps(d) for d in yaml.safe_load_all(text)]


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("schedulerprofile.spec", "spec.schedulerName"),
        ("schedulerprofile.spec.schedulerName", "pods whose spec.schedulerName equals it"),
        ("schedulerprofile.spec.percentageOfNodesToScore", "percentage of all nodes"),
        ("schedulerprofile.spec.plugins.score", "rank the nodes"),
        ("schedulerprofile.spec.plugins.multiPoint.disabled", 'a single entry named "*"'),
        ("schedulerprofile.spec.plugins.filter.enabled.weight", "Score extension point"),
        ("schedulerprofile.spec.pluginConfig.args", "NodeResourcesFitArgs"),
        ("schedulerprofile.status.conditions.reason", "InvalidProfile"),
    ],
)
def test_kubectl_explain_describes_every_field(
    control_plane: ControlPlane, installed: Path, field: str, expected: str
) -> None:
    out = wait_for(lambda: control_plane.kubectl("explain", field), 30, what=f"explain {field}")
    assert "<no description>" not in out, out
    assert expected in " ".join(out.split()), out


def _object_paths(schema: dict[str, Any], path: str) -> list[str]:
    """Every field path whose ``kubectl explain`` lists fields (objects, and arrays of objects)."""
    if schema.get("type") == "array":
        schema = schema.get("items") or {}
    props = schema.get("properties") or {}
    paths = [path] if props else []
    for name, sub in props.items():
        if name != "metadata":
            paths += _object_paths(sub, f"{path}.{name}")
    return paths


def test_kubectl_explain_lists_no_undescribed_field(control_plane: ControlPlane, installed: Path) -> None:
    crd = get_json(control_plane, "crd", "schedulerprofiles.kopfscheduler.io")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    paths = _object_paths(schema, "schedulerprofile")
    assert len(paths) > 15 and "schedulerprofile.spec.plugins.multiPoint.enabled" in paths
    for path in paths:
        out = control_plane.kubectl("explain", path)
        assert "FIELDS:" in out and "<no description>" not in out, out


def test_printer_columns_stay(control_plane: ControlPlane, installed: Path) -> None:
    name = f"columns-{uuid.uuid4().hex[:6]}"
    profile = {
        "apiVersion": "kopfscheduler.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": {"name": name},
        "spec": {"schedulerName": name},
    }
    control_plane.kubectl("create", "-f", "-", input=json.dumps(profile))
    try:
        header = control_plane.kubectl("get", "schedulerprofile", name).splitlines()[0].split()
        assert header == ["NAME", "SCHEDULERNAME", "STRATEGY", "READY", "AGE"]
    finally:
        control_plane.kubectl("delete", "schedulerprofile", name)


# --- exec credential plugin ------------------------------------------------------------------------


def _bound_token(plane: ControlPlane, secret: str) -> str:
    """A token of the manifests' ServiceAccount that stops working when ``secret`` is deleted."""
    plane.kubectl("create", "secret", "generic", secret, "-n", SA_NAMESPACE)
    return plane.kubectl(
        "create",
        "token",
        "kopf-scheduler",
        "-n",
        SA_NAMESPACE,
        "--bound-object-kind=Secret",
        f"--bound-object-name={secret}",
        "--duration=1h",
    ).strip()


def _revoke(plane: ControlPlane, secret: str, token: str) -> None:
    plane.kubectl("delete", "secret", secret, "-n", SA_NAMESPACE, "--wait=true")
    wait_for(lambda: _status_with(plane, token) == 401, 30, what=f"token of {secret} revoked")


def _status_with(plane: ControlPlane, token: str) -> int:
    ctx = ssl.create_default_context(cadata=plane.ca_pem.decode())
    request = urllib.request.Request(
        f"{plane.server}/api/v1/nodes?limit=1", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _secret_name() -> str:
    return f"exec-token-{uuid.uuid4().hex[:8]}"


def test_exec_plugin_kubeconfig_with_expiry_and_revocation(
    control_plane: ControlPlane, installed: Path, tmp_path: Path
) -> None:
    """Our client: the plugin's token is cached, run again when it expires, and again after a 401."""
    plane = control_plane
    s1, s2, s3 = _secret_name(), _secret_name(), _secret_name()
    t1, t2, t3 = _bound_token(plane, s1), _bound_token(plane, s2), _bound_token(plane, s3)
    ttl = 4
    plugin = ExecPlugin(tmp_path / "plugin", t1, ttl=ttl)
    kubeconfig = plugin.kubeconfig(tmp_path / "exec.kubeconfig", plane.server, plane.ca_pem)

    async def scenario() -> None:
        creds = load_credentials(str(kubeconfig))
        assert creds.info.expiration is not None  # Kopf's login gets it too
        async with ApiClient(creds) as api:
            for _ in range(3):
                await api.request("GET", "/api/v1/nodes", params={"limit": "1"})
            assert plugin.calls == 1  # cached while valid

            plugin.set(t2)  # t1 stays valid: only its expiry can make the client ask again
            await asyncio.sleep(ttl - EXPIRY_MARGIN_SECONDS + 0.5)
            await api.request("GET", "/api/v1/nodes", params={"limit": "1"})
            assert plugin.calls == 2 and creds.info.token == t2

            plugin.set(t3, ttl=3600)
            await asyncio.to_thread(_revoke, plane, s2, t2)  # t2 is unexpired but no longer accepted
            await api.request("GET", "/api/v1/nodes", params={"limit": "1"})  # 401 -> run -> retry
            assert plugin.calls == 3 and creds.info.token == t3

    asyncio.run(scenario())


def test_operator_with_exec_plugin_keeps_working_across_token_expiry(
    control_plane: ControlPlane, installed: Path, tmp_path: Path
) -> None:
    """Kopf (peering, logins with ``expiration``) and our client both renew; the first token is revoked."""
    plane = control_plane
    ns = fresh_namespace(plane, "exec")
    secrets = [_secret_name() for _ in range(3)]
    tokens = [_bound_token(plane, s) for s in secrets]
    ttl = 6
    plugin = ExecPlugin(tmp_path / "plugin", tokens[0], ttl=ttl)
    kubeconfig = plugin.kubeconfig(tmp_path / "exec.kubeconfig", plane.server, plane.ca_pem)
    label = {"exec-test": ns}
    create(plane, node(f"{ns}-n1", labels=label))
    peering = f"exec-{ns}"
    with leading_replica(kubeconfig, peering, [ns], f"exec-{ns}", tmp_path) as replica:
        create(plane, pod("p1", ns, node_selector=label))
        wait_for(lambda: node_of(plane, ns, "p1"), 30, what="p1 bound")
        plugin.set(tokens[1])
        _revoke(plane, secrets[0], tokens[0])
        revoked_at = time.time()
        time.sleep(ttl + 1)  # the first token is now expired as well as revoked
        create(plane, pod("p2", ns, node_selector=label))
        wait_for(lambda: node_of(plane, ns, "p2"), 30, what=f"p2 bound after the rotation:\n{replica.logs()}")

        def kopf_keepalive_after_rotation() -> bool:
            peers: dict[str, Any] = get_json(plane, "clusterkopfpeering", peering).get("status") or {}
            seen = (peers.get(f"exec-{ns}") or {}).get("lastseen") or ""
            return bool(seen) and _parse_time(seen) > revoked_at

        wait_for(kopf_keepalive_after_rotation, 30, what="Kopf's keep-alive with a renewed token")
        assert replica.leading() and replica.ready()
        assert plugin.calls >= 2
        logs = replica.logs()
        assert "Traceback" not in logs and "LoginError" not in logs, logs


def _parse_time(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
