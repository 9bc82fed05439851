"""simulate's admission against the real kube-apiserver: the same objects are created on the
control plane and given to simulate; both must accept and refuse the same ones, with the same
message, and store the same priority, preemptionPolicy, class name, tolerations and host ports.
Then simulate's verdict on a preemptionPolicy=Never class matches what the cluster stores."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kopf_scheduler.simulate import Inputs, load_documents, simulate
from kopf_scheduler.simulate_admission import Admission, AdmissionError
from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_operator_helpers import fresh_namespace

pytestmark = pytest.mark.integration


def post(plane: ControlPlane, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST as the admin; (HTTP status, the stored object or the Status the apiserver answered)."""
    ctx = ssl.create_default_context(cadata=plane.ca_pem.decode())
    req = urllib.request.Request(
        plane.server + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {plane.admin_token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def delete(plane: ControlPlane, path: str) -> None:
    ctx = ssl.create_default_context(cadata=plane.ca_pem.decode())
    req = urllib.request.Request(
        plane.server + path, method="DELETE", headers={"Authorization": f"Bearer {plane.admin_token}"}
    )
    with contextlib.suppress(urllib.error.HTTPError):  # already gone is fine
        urllib.request.urlopen(req, context=ctx, timeout=30).close()


CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


@pytest.fixture(scope="module")
def tag() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture
def global_default(control_plane: ControlPlane, tag: str) -> Iterator[dict[str, Any]]:
    """A globalDefault class, removed again at once: it would give every later pod its priority."""
    doc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": f"base-{tag}"},
           "value": 7, "globalDefault": True}  # fmt: skip
    code, stored = post(control_plane, CLASSES, doc)
    assert code == 201, stored
    try:
        yield doc
    finally:
        delete(control_plane, f"{CLASSES}/{doc['metadata']['name']}")


def pclass(name: str, value: int, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, **extra}  # fmt: skip


def pod(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    body = {"schedulerName": "nobody", "containers": [{"name": "c", "image": "pause"}], **spec}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


SCHEDULING_FIELDS = ("priority", "priorityClassName", "preemptionPolicy", "tolerations")


def compare_pod(plane: ControlPlane, admission: Admission, doc: dict[str, Any]) -> str:
    """Create on the apiserver and admit in simulate; assert they agree; return the verdict."""
    ns = doc["metadata"]["namespace"]
    code, answer = post(plane, f"/api/v1/namespaces/{ns}/pods", doc)
    try:
        ours = admission.admit_pod(doc)
    except AdmissionError as exc:
        assert code == 403, (str(exc), answer)
        assert str(exc) == answer["message"]
        return "refused"
    assert code == 201, (ours, answer)
    for key in SCHEDULING_FIELDS:
        assert ours["spec"].get(key) == answer["spec"].get(key), key
    ports = [p for c in ours["spec"]["containers"] for p in c.get("ports", [])]
    stored = [p for c in answer["spec"]["containers"] for p in c.get("ports", [])]
    assert [p.get("hostPort") for p in ports] == [p.get("hostPort") for p in stored]
    return "accepted"


def test_simulate_admits_and_refuses_pods_like_the_apiserver(
    control_plane: ControlPlane, tag: str, global_default: dict[str, Any]
) -> None:
    plane = control_plane
    ns = fresh_namespace(plane, "adm")
    polite, gold = pclass(f"polite-{tag}", 1000, preemptionPolicy="Never"), pclass(f"gold-{tag}", 500)
    admission = Admission()
    for doc in (global_default, polite, gold):
        if doc is not global_default:
            code, stored = post(plane, CLASSES, doc)
            assert code == 201, stored
            assert stored["preemptionPolicy"] == admission.add_priority_class(doc).preemption_policy
        else:
            admission.add_priority_class(doc)
    web = pod("web", ns, hostNetwork=True)
    web["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    cases = {
        "polite": (pod("polite", ns, priorityClassName=polite["metadata"]["name"]), "accepted"),
        "policy-beside-class": (
            pod("b", ns, priorityClassName=gold["metadata"]["name"], preemptionPolicy="Never"),
            "refused",
        ),
        "priority-beside-class": (
            pod("c", ns, priorityClassName=gold["metadata"]["name"], priority=5),
            "refused",
        ),
        "same-priority-beside-class": (
            pod("c2", ns, priorityClassName=gold["metadata"]["name"], priority=500),
            "accepted",
        ),
        "global-default": (pod("d", ns), "accepted"),
        "policy-against-the-default": (pod("f", ns, preemptionPolicy="Never"), "refused"),
        "unknown-class": (pod("e", ns, priorityClassName=f"nope-{tag}"), "refused"),
        "system-class": (pod("s", ns, priorityClassName="system-cluster-critical"), "accepted"),
        "tolerates-everything": (pod("t", ns, tolerations=[{"operator": "Exists"}]), "accepted"),
        "host-network": (web, "accepted"),
    }
    verdicts = {case: compare_pod(plane, admission, doc) for case, (doc, _) in cases.items()}
    assert verdicts == {case: want for case, (_, want) in cases.items()}


def test_simulate_refuses_priority_classes_like_the_apiserver(
    control_plane: ControlPlane, tag: str, global_default: dict[str, Any]
) -> None:
    admission = Admission()
    admission.add_priority_class(global_default)
    for doc in (
        pclass(f"huge-{tag}", 1_000_000_001),
        pclass(f"system-{tag}", 5),
        pclass(f"odd-{tag}", 5, preemptionPolicy="Sometimes"),
        pclass(f"second-default-{tag}", 3, globalDefault=True),
    ):
        code, answer = post(control_plane, CLASSES, doc)
        with pytest.raises(AdmissionError) as exc:
            admission.add_priority_class(doc)
        assert code in (403, 422), answer
        assert str(exc.value) == answer["message"]


def test_never_class_verdict_matches_what_the_cluster_stores(control_plane: ControlPlane, tag: str) -> None:
    """The pod the apiserver stores for a Never class does not preempt, in simulate either."""
    plane = control_plane
    ns = fresh_namespace(plane, "adm")
    low, polite = pclass(f"low-{tag}", 1), pclass(f"never-{tag}", 1000, preemptionPolicy="Never")
    for doc in (low, polite):
        assert post(plane, CLASSES, doc)[0] == 201
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"adm-{tag}"},
            "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}}}  # fmt: skip
    filler = pod("filler", ns, nodeName=node["metadata"]["name"], priorityClassName=low["metadata"]["name"])
    waiting = pod("waiting", ns, priorityClassName=polite["metadata"]["name"])
    for p, cpu in ((filler, "900m"), (waiting, "500m")):
        p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
        p["spec"]["schedulerName"] = "kopf-scheduler" if p is waiting else "nobody"
    stored = []
    for p in (filler, waiting):
        code, answer = post(plane, f"/api/v1/namespaces/{ns}/pods", p)
        assert code == 201, answer
        stored.append(answer)
    assert stored[1]["spec"]["preemptionPolicy"] == "Never"

    admission_docs = [low, polite, node, filler, waiting]
    path = plane.workdir / f"adm-{tag}.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": admission_docs}))
    inputs: Inputs = load_documents([str(path)])
    assert [(p.priority, p.preemption_policy) for p in inputs.pending] == [
        (stored[1]["spec"]["priority"], stored[1]["spec"]["preemptionPolicy"])
    ]
    (outcome,) = asyncio.run(simulate(inputs, seed=0))
    assert (outcome.node, outcome.nominated_node, outcome.victims) == ("", "", [])
    assert outcome.message == (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    )


def test_simulate_applies_limit_ranges_like_the_apiserver(control_plane: ControlPlane) -> None:
    from kopf_scheduler.api.quantity import parse_quantity

    plane = control_plane
    ns = fresh_namespace(plane, "adm")
    item = {
        "type": "Container",
        "default": {"cpu": "1", "memory": "256Mi"},
        "defaultRequest": {"cpu": "250m"},
        "max": {"ephemeral-storage": "1Gi"},  # becomes the default limit, then the default request
    }
    lr = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults", "namespace": ns},
          "spec": {"limits": [item]}}  # fmt: skip
    code, stored_lr = post(plane, f"/api/v1/namespaces/{ns}/limitranges", lr)
    assert code == 201, stored_lr
    admission = Admission()
    ours_lr = admission.add_limit_range(lr)
    assert (
        ours_lr["spec"]["limits"][0]["defaultRequest"].keys()
        == stored_lr["spec"]["limits"][0]["defaultRequest"].keys()
    )
    shapes = {
        "bare": {},
        "own-limit": {"limits": {"cpu": "2"}},
        "own-request": {"requests": {"memory": "64Mi"}},
    }
    for name, resources in shapes.items():
        doc = pod(name, ns)
        doc["spec"]["containers"][0]["resources"] = resources
        code, answer = post(plane, f"/api/v1/namespaces/{ns}/pods", doc)
        assert code == 201, answer
        ours = admission.admit_pod(doc)["spec"]["containers"][0]["resources"]
        theirs = answer["spec"]["containers"][0]["resources"]
        for part in ("requests", "limits"):
            mine, real = ours.get(part) or {}, theirs.get(part) or {}
            assert mine.keys() == real.keys(), (name, part, mine, real)
            assert all(parse_quantity(mine[k]) == parse_quantity(real[k]) for k in mine), (name, part)
