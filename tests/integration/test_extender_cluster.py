"""HTTP scheduler extenders, ours beside the reference on one control plane, both started with the same
KubeSchedulerConfiguration (``kopf-scheduler run --config`` and kcp's kube-scheduler ``--config``),
each with its own schedulerName and pool of nodes, both given one small extender served here:

- ``/full`` filters (not nodeCacheCapable: whole Nodes travel): it rejects the nodes labelled so,
  some as unresolvable; ``/names`` (nodeCacheCapable: names only) prioritizes (weight 5) and binds,
  writing the Binding itself and recording the call. The same node for each pod, the same
  FailedScheduling note for the pod the extender leaves nowhere to go, the extender's bind used by
  both, and the request bodies of the same shape.
- An unreachable extender: an ignorable one is skipped (the pod binds); one that is not, for the pods
  asking for the resource it manages (``ignoredByScheduler``: NodeResourcesFit leaves it to the
  extender), fails that pod's cycle with the reference's words, and the scheduler keeps binding.
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_config_cluster import config_file, ours, reference
from .test_operator_helpers import create, deploy, free_port, fresh_namespace, get_json, node, pod, wait_for

pytestmark = pytest.mark.integration

REJECT = "extender.test/reject"
UNRESOLVABLE = "extender.test/unresolvable"
PREFER = "extender.test/prefer"
REJECTED_MSG = "node(s) were rejected by the test extender"
UNRESOLVABLE_MSG = "node(s) are in a zone the test extender cannot serve"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    p = ControlPlane()
    try:
        p.start()
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def sa_kubeconfig(plane: ControlPlane) -> Path:
    return deploy(plane)


class Extender:
    """The extender: ``POST /<prefix>/<verb>``, answers computed from the body, every call recorded
    as (verb path, the pod's schedulerName, body). Its bind writes the Binding as cluster admin."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                scheduler = (body.get("Pod") or {}).get("spec", {}).get("schedulerName", "")
                if "PodName" in body:  # a bind names no scheduler: ask the pod
                    scheduler = outer.scheduler_of(body["PodNamespace"], body["PodName"])
                with outer.lock:
                    outer.calls.append((self.path, scheduler, body))
                status, answer = outer.answer(self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        ctx = ssl.create_default_context(cadata=self.plane.ca_pem.decode())
        request = urllib.request.Request(
            self.plane.server + path,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Authorization": f"Bearer {self.plane.admin_token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=ctx, timeout=10) as resp:
            return json.loads(resp.read())

    def scheduler_of(self, namespace: str, name: str) -> str:
        return str(self._api("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")["spec"]["schedulerName"])

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if path == "/full/filter":
            result: dict[str, Any] = {"FailedNodes": {}, "FailedAndUnresolvableNodes": {}}
            kept = []
            for item in body["Nodes"]["items"]:
                name, labels = item["metadata"]["name"], item["metadata"].get("labels") or {}
                if REJECT in labels:
                    result["FailedNodes"][name] = REJECTED_MSG
                elif UNRESOLVABLE in labels:
                    result["FailedAndUnresolvableNodes"][name] = UNRESOLVABLE_MSG
                else:
                    kept.append(item)
            result["Nodes"] = {"metadata": {}, "items": kept}
            return 200, result
        if path == "/names/prioritize":
            return 200, [{"Host": n, "Score": 10 if n.endswith("-best") else 2} for n in body["NodeNames"]]
        if path == "/names/bind":
            ns, name = body["PodNamespace"], body["PodName"]
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": ns, "uid": body["PodUID"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": body["Node"]},
            }
            try:
                self._api("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding)
            except urllib.error.HTTPError as exc:
                return 200, {"Error": f"binding: {exc.code}"}
            return 200, {"Error": ""}
        return 404, {}

    def of(self, path: str, scheduler: str) -> list[dict[str, Any]]:
        with self.lock:
            return [body for p, s, body in self.calls if p == path and s == scheduler]


def pool_nodes(pool: str) -> list[dict[str, Any]]:
    def n(suffix: str, cpu: str, **labels: str) -> dict[str, Any]:
        return node(f"{pool}-{suffix}", cpu=cpu, labels={"pool": pool, **labels})

    return [
        n("small", "2", tier="x"),
        n("best", "4", **{PREFER: "true"}),
        n("other", "4"),
        n("rejected", "4", tier="x", **{REJECT: "true"}),
        n("wrongzone", "4", tier="x", **{UNRESOLVABLE: "true"}),
    ]


def first_failed_note(plane: ControlPlane, ns: str, name: str) -> str:
    def note() -> str | None:
        items = get_json(plane, "events.v1.events.k8s.io", "-n", ns)["items"]
        evs = [
            e
            for e in items
            if (e.get("regarding") or {}).get("name") == name and e["reason"] == "FailedScheduling"
        ]
        evs.sort(key=lambda e: e["metadata"]["creationTimestamp"])
        return str(evs[0]["note"]) if evs else None

    return wait_for(note, 60, what=f"FailedScheduling of {name}")


def test_an_extender_filters_scores_and_binds_for_both_alike(
    plane: ControlPlane, sa_kubeconfig: Path, tmp_path: Path
) -> None:
    ns = fresh_namespace(plane, "extender")
    extender = Extender(plane)
    extenders = [
        {"urlPrefix": f"{extender.url}/full", "filterVerb": "filter"},
        {
            "urlPrefix": f"{extender.url}/names",
            "prioritizeVerb": "prioritize",
            "weight": 5,
            "bindVerb": "bind",
            "nodeCacheCapable": True,
        },
    ]
    pools = {"ext-ours": "ours", "ext-ref": "ref"}
    for pool in pools.values():
        create(plane, *pool_nodes(pool))
    ours_cfg = config_file(
        tmp_path / "ours.yaml", sa_kubeconfig, [{"schedulerName": "ext-ours"}], extenders=extenders
    )
    ref_cfg = config_file(
        tmp_path / "ref.yaml", plane.kubeconfig, [{"schedulerName": "ext-ref"}], extenders=extenders
    )
    theirs = reference(plane, ref_cfg, tmp_path / "reference.log")
    mine = ours(ours_cfg, tmp_path / "ours.log")
    try:
        for scheduler, pool in pools.items():
            fits = pod(f"{pool}-fits", ns, scheduler, cpu="500m", node_selector={"pool": pool})
            nowhere = pod(
                f"{pool}-nowhere", ns, scheduler, cpu="3", node_selector={"pool": pool, "tier": "x"}
            )
            create(plane, fits, nowhere)

        def bound() -> dict[str, str] | None:
            got = {
                p: get_json(plane, "pod", f"{p}-fits", "-n", ns)["spec"].get("nodeName")
                for p in pools.values()
            }
            return got if all(got.values()) else None

        placed = wait_for(bound, 90, what=f"both fits pods bound:\n{mine.logs()}\n{theirs.logs()}")
        # the extender's filter dropped rejected/wrongzone, its score (10 x 5 x 10) chose -best
        assert placed == {"ours": "ours-best", "ref": "ref-best"}, placed
        for scheduler, pool in pools.items():
            binds = extender.of("/names/bind", scheduler)
            assert [(b["PodName"], b["Node"]) for b in binds] == [(f"{pool}-fits", f"{pool}-best")], binds
        ours_note = first_failed_note(plane, ns, "ours-nowhere")
        ref_note = first_failed_note(plane, ns, "ref-nowhere")
        assert ours_note == ref_note, (ours_note, ref_note)
        assert f"1 {REJECTED_MSG}" in ours_note and f"1 {UNRESOLVABLE_MSG}" in ours_note, ours_note
        # the same bodies: keys, the node list's shape, names only where nodeCacheCapable
        for path in ("/full/filter", "/names/prioritize", "/names/bind"):
            mine_body, ref_body = extender.of(path, "ext-ours")[0], extender.of(path, "ext-ref")[0]
            assert sorted(mine_body) == sorted(ref_body), (path, sorted(mine_body), sorted(ref_body))
        full = {s: extender.of("/full/filter", s)[0] for s in pools}
        assert all(
            b["NodeNames"] is None and sorted(b["Nodes"]) == ["items", "metadata"] for b in full.values()
        )
        assert sorted(full["ext-ours"]["Pod"]) == sorted(full["ext-ref"]["Pod"])
        ours_item, ref_item = full["ext-ours"]["Nodes"]["items"][0], full["ext-ref"]["Nodes"]["items"][0]
        assert set(ours_item) <= set(ref_item) and "metadata" in ours_item, (
            sorted(ours_item),
            sorted(ref_item),
        )
        names = {s: extender.of("/names/prioritize", s)[0] for s in pools}
        assert all(b["Nodes"] is None and isinstance(b["NodeNames"], list) for b in names.values())
        assert sorted(n.split("-", 1)[1] for n in names["ext-ours"]["NodeNames"]) == sorted(
            n.split("-", 1)[1] for n in names["ext-ref"]["NodeNames"]
        )
        bind = extender.of("/names/bind", "ext-ours")[0]
        assert bind["PodUID"] == get_json(plane, "pod", "ours-fits", "-n", ns)["metadata"]["uid"]
        # a Scheduled event from each, as after any bind
        for pool in pools.values():
            items = get_json(plane, "events.v1.events.k8s.io", "-n", ns)["items"]
            assert any(
                e["reason"] == "Scheduled" and e["regarding"]["name"] == f"{pool}-fits" for e in items
            ), pool
    finally:
        mine.stop()
        theirs.stop()
        extender.stop()


def gpu_pod(name: str, ns: str, scheduler: str, pool: str) -> dict[str, Any]:
    p = pod(name, ns, scheduler, node_selector={"pool": pool})
    resources = p["spec"]["containers"][0]["resources"]
    resources["requests"]["example.com/gpu"] = "1"
    resources["limits"] = {"example.com/gpu": "1"}
    return p


def test_an_unreachable_extender_is_skipped_if_ignorable_else_fails_the_pods_cycle(
    plane: ControlPlane, sa_kubeconfig: Path, tmp_path: Path
) -> None:
    ns = fresh_namespace(plane, "extender-down")
    port = free_port()
    down = f"http://127.0.0.1:{port}"  # nothing listens there
    extenders = [
        {"urlPrefix": f"{down}/anything", "filterVerb": "filter", "ignorable": True},
        {
            "urlPrefix": f"{down}/gpus",
            "filterVerb": "filter",
            "managedResources": [{"name": "example.com/gpu", "ignoredByScheduler": True}],
        },
    ]
    pools = {"down-ours": "down-ours", "down-ref": "down-ref"}
    for pool in pools.values():
        create(plane, node(f"{pool}-1", cpu="4", labels={"pool": pool}))
    ours_cfg = config_file(
        tmp_path / "ours.yaml", sa_kubeconfig, [{"schedulerName": "down-ours"}], extenders=extenders
    )
    ref_cfg = config_file(
        tmp_path / "ref.yaml", plane.kubeconfig, [{"schedulerName": "down-ref"}], extenders=extenders
    )
    theirs = reference(plane, ref_cfg, tmp_path / "reference.log")
    mine = ours(ours_cfg, tmp_path / "ours.log")
    try:
        for scheduler, pool in pools.items():
            create(
                plane,
                pod(f"{pool}-plain", ns, scheduler, node_selector={"pool": pool}),
                gpu_pod(f"{pool}-gpu", ns, scheduler, pool),
            )
        notes = {pool: first_failed_note(plane, ns, f"{pool}-gpu") for pool in pools.values()}
        expected = f'Post "{down}/gpus/filter": dial tcp 127.0.0.1:{port}: connect: connection refused'
        assert notes == {"down-ours": expected, "down-ref": expected}, notes
        for pool in pools.values():
            cond = next(
                c
                for c in get_json(plane, "pod", f"{pool}-gpu", "-n", ns)["status"]["conditions"]
                if c["type"] == "PodScheduled"
            )
            assert (cond["reason"], cond["message"]) == ("SchedulerError", expected), (pool, cond)

        def plain_bound() -> bool:
            return all(
                get_json(plane, "pod", f"{p}-plain", "-n", ns)["spec"].get("nodeName") for p in pools.values()
            )

        wait_for(plain_bound, 60, what=f"plain pods bound past the ignorable extender:\n{mine.logs()}")
        # still scheduling after the failed cycles
        create(plane, pod("down-ours-later", ns, "down-ours", node_selector={"pool": "down-ours"}))
        wait_for(lambda: get_json(plane, "pod", "down-ours-later", "-n", ns)["spec"].get("nodeName"), 60)
        assert mine.proc.poll() is None
    finally:
        mine.stop()
        theirs.stop()
