"""Unit tests of the operator edge without a cluster: profiles, leader rule, informer, HTTP client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from aiohttp import web

from kopf_scheduler.api.objects import parse_pod
from kopf_scheduler.cluster.apiclient import ApiClient, Gone
from kopf_scheduler.cluster.client import KubeClusterClient
from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials
from kopf_scheduler.cluster.informer import Backoff, Informer, InformerHandlers, ResourceKind
from kopf_scheduler.cluster.profiles import ProfileController
from kopf_scheduler.framework.client import ApiError, Conflict, NotFound, TransientError

# --- profiles -----------------------------------------------------------------------------------


class FakeProfiles:
    def __init__(self) -> None:
        self.specs: dict[str, Any] = {"kopf-scheduler": "builtin"}

    def set(self, spec: Any) -> None:
        self.specs[spec.scheduler_name] = spec

    def remove(self, name: str) -> None:
        self.specs.pop(name, None)
        if name == "kopf-scheduler":
            self.specs[name] = "builtin"

    def names(self) -> list[str]:
        return list(self.specs)


def _cr(
    name: str, gen: int, spec: Mapping[str, Any], created: str = "2024-01-01T00:00:00Z"
) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": gen, "creationTimestamp": created}, "spec": dict(spec)}


def _fit(strategy: str) -> dict[str, Any]:
    return {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": strategy}}}


@pytest.fixture
def controller() -> tuple[ProfileController, FakeProfiles, list[tuple[str, dict[str, Any]]], list[Any]]:
    profiles = FakeProfiles()
    written: list[tuple[str, dict[str, Any]]] = []
    changes: list[Any] = []

    async def write(name: str, status: dict[str, Any]) -> None:
        written.append((name, status))

    ctl = ProfileController(profiles, write, lambda added, removed: changes.append((added, removed)))
    return ctl, profiles, written, changes


async def test_valid_then_invalid_edit_keeps_last_valid(controller: Any) -> None:
    ctl, profiles, written, changes = controller
    status = await ctl.apply(_cr("p", 1, {"schedulerName": "bp", "pluginConfig": [_fit("MostAllocated")]}))
    assert status["conditions"][0]["status"] == "True"
    assert status["scoreStrategy"] == "MostAllocated" and status["activeGeneration"] == 1
    assert changes == [({"bp"}, set())]
    in_force = profiles.specs["bp"]
    body = _cr("p", 2, {"schedulerName": "bp", "pluginConfig": [_fit("Sideways")]})
    body["status"] = status
    bad = await ctl.apply(body)
    cond = bad["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "InvalidProfile")
    assert cond["message"].startswith("spec.pluginConfig[0].args.scoringStrategy.type: ")
    assert "Sideways" in cond["message"]
    assert bad["observedGeneration"] == 2 and bad["activeGeneration"] == 1
    assert bad["scoreStrategy"] == "MostAllocated"
    assert profiles.specs["bp"] is in_force
    assert [name for name, _ in written] == ["p", "p"]


async def test_unchanged_status_is_not_rewritten(controller: Any) -> None:
    ctl, _, written, _ = controller
    body = _cr("p", 1, {"schedulerName": "bp"})
    body["status"] = await ctl.apply(body)
    await ctl.apply(body)
    assert len(written) == 1


async def test_delete_restores_default_and_unserves_custom(controller: Any) -> None:
    ctl, profiles, _, changes = controller
    await ctl.apply(
        _cr("mine", 1, {"schedulerName": "kopf-scheduler", "pluginConfig": [_fit("MostAllocated")]})
    )
    assert profiles.specs["kopf-scheduler"] != "builtin"
    await ctl.apply(_cr("other", 1, {"schedulerName": "x"}))
    ctl.delete({"metadata": {"name": "mine"}})
    assert profiles.specs["kopf-scheduler"] == "builtin"
    ctl.delete({"metadata": {"name": "other"}})
    assert "x" not in profiles.specs
    assert changes[-1] == (set(), {"x"})


async def test_second_resource_for_a_name_conflicts(controller: Any) -> None:
    ctl, _profiles, _, _ = controller
    await ctl.apply(_cr("old", 1, {"schedulerName": "x"}, "2024-01-01T00:00:00Z"))
    status = await ctl.apply(_cr("new", 1, {"schedulerName": "x"}, "2024-02-01T00:00:00Z"))
    assert status["conditions"][0]["reason"] == "Conflict"
    assert "'old'" in status["conditions"][0]["message"]
    assert ctl.owned["old"].scheduler_name == "x" and "new" not in ctl.owned


async def test_rename_moves_the_profile(controller: Any) -> None:
    ctl, profiles, _, _ = controller
    await ctl.apply(_cr("p", 1, {"schedulerName": "a"}))
    await ctl.apply(_cr("p", 2, {"schedulerName": "b"}))
    assert "a" not in profiles.specs and "b" in profiles.specs


async def test_resync_drops_vanished(controller: Any) -> None:
    ctl, profiles, _, _ = controller
    await ctl.apply(_cr("gone", 1, {"schedulerName": "g"}))
    await ctl.resync([_cr("kept", 1, {"schedulerName": "k"})])
    assert "g" not in profiles.specs and "k" in profiles.specs


# --- informer -----------------------------------------------------------------------------------


class FakeApi:
    """Scripted lists and watch streams."""

    def __init__(self) -> None:
        self.lists: list[tuple[list[dict[str, Any]], str]] = []
        self.watches: list[list[dict[str, Any]] | Exception] = []

    async def list_pages(
        self, path: str, params: Any = None, page_size: int = 500
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        items, rv = self.lists.pop(0)
        yield items, rv

    async def watch(
        self, path: str, rv: str, params: Any = None, timeout: int = 300, **options: Any
    ) -> AsyncIterator[dict[str, Any]]:
        script = self.watches.pop(0) if self.watches else None
        if script is None:
            await asyncio.sleep(3600)
            return
        if isinstance(script, Exception):
            raise script
        for event in script:
            yield event


def _obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


async def test_informer_relist_after_410_delivers_missed_deletions() -> None:
    api = FakeApi()
    api.lists = [([_obj("a", "1"), _obj("b", "1")], "10"), ([_obj("b", "1"), _obj("c", "12")], "20")]
    api.watches = [[{"type": "MODIFIED", "object": _obj("a", "11")}], Gone("too old", 410)]
    seen: list[tuple[str, str]] = []
    informer: Informer[Mapping[str, Any]] = Informer(
        api,  # type: ignore[arg-type]
        ResourceKind("Thing", "/things"),
        InformerHandlers(
            parse=lambda raw: raw,
            add=lambda o: seen.append(("add", o["metadata"]["name"])),
            update=lambda old, new: seen.append(("update", new["metadata"]["name"])),
            delete=lambda o: seen.append(("delete", o["metadata"]["name"])),
        ),
        backoff=Backoff(initial=0.01),
    )
    task = asyncio.ensure_future(informer.run())
    for _ in range(100):
        await asyncio.sleep(0.01)
        if informer.relists:
            break
    await asyncio.sleep(0.05)
    task.cancel()
    assert informer.synced.is_set()
    assert seen == [("add", "a"), ("add", "b"), ("update", "a"), ("add", "c"), ("delete", "a")]
    assert set(informer.store) == {"ns/b", "ns/c"} and informer.resource_version == "20"


async def test_informer_skips_malformed_and_reports() -> None:
    api = FakeApi()
    bad = {"metadata": {"name": "bad", "namespace": "ns"}, "spec": {"containers": "nope"}}
    good = {"metadata": {"name": "good", "namespace": "ns", "uid": "u"}, "spec": {"containers": []}}
    api.lists = [([bad, good], "5")]
    invalid: list[str] = []
    added: list[str] = []
    informer = Informer(
        api,  # type: ignore[arg-type]
        ResourceKind("Pod", "/pods"),
        InformerHandlers(
            parse=parse_pod,
            add=lambda p: added.append(p.name),
            update=lambda o, n: None,
            delete=lambda p: None,
            invalid=lambda raw, exc: invalid.append(exc.path),
        ),
    )
    await informer.list()
    assert added == ["good"] and invalid == ["spec.containers"]


async def test_informer_survives_parser_exceptions_other_than_object_error() -> None:
    api = FakeApi()
    api.lists = [([_obj("a", "1"), _obj("b", "1")], "5")]
    invalid: list[str] = []

    def parse(raw: Mapping[str, Any]) -> Mapping[str, Any]:
        if raw["metadata"]["name"] == "a":
            raise ValueError("invalid literal for int()")
        return raw

    informer: Informer[Mapping[str, Any]] = Informer(
        api,  # type: ignore[arg-type]
        ResourceKind("Thing", "/things"),
        InformerHandlers(
            parse=parse,
            add=lambda o: None,
            update=lambda o, n: None,
            delete=lambda o: None,
            invalid=lambda raw, exc: invalid.append(exc.message),
        ),
    )
    await informer.list()
    assert set(informer.store) == {"ns/b"} and invalid == ["ValueError: invalid literal for int()"]


# --- HTTP client --------------------------------------------------------------------------------


async def _fake_apiserver(
    handle: Any, method: str = "*", path: str = "/{tail:.*}"
) -> tuple[web.AppRunner, Credentials]:
    """An aiohttp server on a free loopback port answering with ``handle``, and credentials for it."""
    app = web.Application()
    app.router.add_route(method, path, handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, Credentials(ConnectionInfo(server=f"http://127.0.0.1:{port}", token="t0k"))


@pytest.fixture
async def server() -> AsyncIterator[tuple[KubeClusterClient, list[tuple[str, str, Any, str]]]]:
    calls: list[tuple[str, str, Any, str]] = []
    responses: dict[tuple[str, str], tuple[int, Any]] = {}

    async def handle(request: web.Request) -> web.Response:
        body = await request.text()
        calls.append(
            (
                request.method,
                request.path,
                json.loads(body) if body else None,
                request.headers.get("Content-Type", ""),
            )
        )
        status, payload = responses.get((request.method, request.path), (200, {}))
        return web.json_response(payload, status=status)

    runner, creds = await _fake_apiserver(handle)
    client = KubeClusterClient(ApiClient(creds, max_in_flight=4), instance="kopf-scheduler-test")
    client.responses = responses  # type: ignore[attr-defined]
    yield client, calls
    await client.api.close()
    await runner.cleanup()


def _pod(**spec: Any) -> Any:
    return parse_pod(
        {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "uid": "uid-1",
                "resourceVersion": "7",
                "generation": 1,
            },
            "spec": {"schedulerName": "kopf-scheduler", "containers": [], **spec},
        }
    )


async def test_bind_posts_a_binding_and_maps_errors(server: Any) -> None:
    client, calls = server
    await client.bind(_pod(), "n1")
    method, path, body, _ = calls[-1]
    assert (method, path) == ("POST", "/api/v1/namespaces/ns/pods/p/binding")
    assert body["kind"] == "Binding" and body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert body["metadata"]["uid"] == "uid-1"
    for status, exc in ((409, Conflict), (404, NotFound), (500, ApiError), (410, Gone)):
        client.responses[("POST", path)] = (status, {"message": "nope"})
        with pytest.raises(exc) as info:
            await client.bind(_pod(), "n1")
        assert info.value.status == status


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message}  # fmt: skip


@pytest.mark.parametrize(
    ("code", "payload", "transient", "reason"),
    [
        (500, status_body(500, "InternalError", "Internal error occurred: etcd"), True, "InternalError"),
        (
            503,
            status_body(503, "ServiceUnavailable", "the server is shutting down"),
            True,
            "ServiceUnavailable",
        ),
        (500, status_body(500, "", "no reason given"), True, ""),  # an unknown reason with 500 or 503
        (500, status_body(500, "ServerTimeout", "timed out"), False, "ServerTimeout"),  # known: not retried
        (504, status_body(504, "Timeout", "timeout"), False, "Timeout"),
        (429, status_body(429, "TooManyRequests", "slow down"), False, "TooManyRequests"),
        (502, "<html>bad gateway</html>", True, "InternalError"),  # not a Status: client-go's generic 5xx
        (503, "unavailable", True, "ServiceUnavailable"),
        (403, status_body(403, "Forbidden", 'pods "p" is forbidden'), False, "Forbidden"),
    ],
)
async def test_errors_are_mapped_like_client_go(
    server: Any, code: int, payload: Any, transient: bool, reason: str
) -> None:
    """``util.Retriable``: InternalError or ServiceUnavailable (or an unknown reason with 500/503)
    is a TransientError, which DefaultBinder retries; the message is the apiserver's own."""
    client, _ = server
    path = "/api/v1/namespaces/ns/pods/p/binding"
    client.responses[("POST", path)] = (code, payload)
    with pytest.raises(ApiError) as info:
        await client.bind(_pod(), "n1")
    assert isinstance(info.value, TransientError) is transient
    assert (info.value.status, info.value.reason) == (code, reason)
    if isinstance(payload, dict):
        assert str(info.value) == payload["message"]


async def test_a_refused_connection_is_transient_and_worded_as_client_go() -> None:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    creds = Credentials(ConnectionInfo(server=f"http://127.0.0.1:{port}", token="t0k"))
    client = KubeClusterClient(ApiClient(creds))
    try:
        with pytest.raises(TransientError) as info:
            await client.bind(_pod(), "n1")
    finally:
        await client.api.close()
    assert str(info.value) == (
        f'Post "http://127.0.0.1:{port}/api/v1/namespaces/ns/pods/p/binding": '
        f"dial tcp 127.0.0.1:{port}: connect: connection refused"
    )


async def test_default_binder_retries_an_apiserver_503_through_the_edge(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """503 ServiceUnavailable twice, then the Binding is created: three POSTs, one bind, success."""
    from types import SimpleNamespace

    from kopf_scheduler.framework.interface import CycleState
    from kopf_scheduler.plugins.default_binder import DefaultBinder

    answers = [(503, status_body(503, "ServiceUnavailable", "the server is shutting down"))] * 2
    answers.append((201, {"kind": "Status", "status": "Success", "code": 201}))
    posts: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        posts.append(await request.json())
        code, payload = answers.pop(0)
        return web.json_response(payload, status=code)

    async def no_wait(seconds: float) -> None:
        pass

    monkeypatch.setattr(DefaultBinder, "sleep", staticmethod(no_wait))
    runner, creds = await _fake_apiserver(handle, "POST")
    client = KubeClusterClient(ApiClient(creds))
    try:
        binder = DefaultBinder(None, SimpleNamespace(client=client))  # type: ignore[arg-type]
        assert await binder.bind(CycleState(), _pod(), "n1") is None
    finally:
        await client.api.close()
        await runner.cleanup()
    assert len(posts) == 3 and not answers
    assert all(p["target"]["name"] == "n1" and p["metadata"]["uid"] == "uid-1" for p in posts)


async def test_a_reset_connection_is_not_transient() -> None:
    """A reset after the request was sent may hide an applied Binding: not blindly retried."""

    async def reset(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()
        return web.Response()

    runner, creds = await _fake_apiserver(reset, "POST")
    client = KubeClusterClient(ApiClient(creds))
    try:
        with pytest.raises(ApiError) as info:
            await client.bind(_pod(), "n1")
        assert not isinstance(info.value, TransientError)
    finally:
        await client.api.close()
        await runner.cleanup()


async def test_events_and_condition(server: Any) -> None:
    client, calls = server
    await client.record_scheduled(_pod(), "n1")
    _, path, event, _ = calls[-1]
    assert path == "/apis/events.k8s.io/v1/namespaces/ns/events"
    assert event["reason"] == "Scheduled" and event["type"] == "Normal" and event["action"] == "Binding"
    assert event["note"] == "Successfully assigned ns/p to n1"
    assert event["reportingController"] == "kopf-scheduler"
    assert event["reportingInstance"] == "kopf-scheduler-test"
    assert event["regarding"]["uid"] == "uid-1" and event["regarding"]["kind"] == "Pod"
    calls.clear()
    await client.record_failed(_pod(), "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu.")
    by_path = {c[1]: c for c in calls}
    status_call = by_path["/api/v1/namespaces/ns/pods/p/status"]
    assert status_call[0] == "PATCH" and status_call[3] == "application/strategic-merge-patch+json"
    cond = status_call[2]["status"]["conditions"][0]
    assert cond["type"] == "PodScheduled" and cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert cond["observedGeneration"] == 1
    ev = by_path["/apis/events.k8s.io/v1/namespaces/ns/events"][2]
    assert ev["type"] == "Warning" and ev["reason"] == "FailedScheduling"
    # The same failure again becomes a series on the same event, not a new object.
    calls.clear()
    await client.record_failed(_pod(), "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu.")
    series = [c for c in calls if "/events/" in c[1]]
    assert series and series[0][0] == "PATCH" and series[0][2]["series"]["count"] == 2


async def test_unchanged_condition_is_not_patched(server: Any) -> None:
    client, calls = server
    msg = "0/1 nodes are available: 1 Insufficient cpu."
    raw_pod = _pod()
    raw = dict(raw_pod.raw)
    raw["status"] = {
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}]
    }
    await client.record_failed(parse_pod(raw), "Unschedulable", msg)
    assert not [c for c in calls if c[1].endswith("/status")]


async def test_condition_and_nomination_share_one_status_patch(server: Any) -> None:
    """The reference's ``updatePod``: one PATCH for PodScheduled=False and nominatedNodeName, only the
    parts that change, nothing when neither does (PreemptionBasic: 500 fewer writes of 2,500)."""
    client, calls = server
    msg = "0/1 nodes are available: 1 Insufficient cpu."

    def status_patches() -> list[dict[str, Any]]:
        return [c[2]["status"] for c in calls if c[1].endswith("/status")]

    await client.record_failed(_pod(), "Unschedulable", msg, nominated_node="n2")
    [both] = status_patches()
    assert both["nominatedNodeName"] == "n2" and both["conditions"][0]["reason"] == "Unschedulable"

    raw = dict(_pod().raw)
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}
    raw["status"] = {"nominatedNodeName": "n2", "conditions": [cond]}
    calls.clear()
    await client.record_failed(parse_pod(raw), "Unschedulable", msg, nominated_node="n2")
    assert status_patches() == []  # neither changed
    await client.record_failed(parse_pod(raw), "Unschedulable", msg, nominated_node="")
    assert status_patches() == [{"nominatedNodeName": None}]  # "" clears, the condition stays


async def test_evict_marks_then_deletes_with_uid_precondition(server: Any) -> None:
    client, calls = server
    victim = _pod(nodeName="n1")
    await client.evict(victim, _pod(), "")
    (m1, p1, b1, _), (m2, p2, b2, _), (_m3, _p3, b3, _) = calls
    assert (m1, p1) == ("PATCH", "/api/v1/namespaces/ns/pods/p/status")
    cond = b1["status"]["conditions"][0]
    assert (cond["type"], cond["reason"]) == ("DisruptionTarget", "PreemptionByScheduler")
    assert cond["message"] == "kopf-scheduler: preempting to accommodate a higher priority pod"
    assert (m2, p2) == ("DELETE", "/api/v1/namespaces/ns/pods/p") and b2["preconditions"] == {"uid": "uid-1"}
    assert b3["reason"] == "Preempted" and b3["note"] == "Preempted by pod uid-1 on node n1"


async def test_bind_volumes(server: Any) -> None:
    client, calls = server
    client.responses[("GET", "/api/v1/namespaces/ns/persistentvolumeclaims/static")] = (
        200,
        {"metadata": {"uid": "pvc-uid", "resourceVersion": "3"}},
    )
    client.responses[("GET", "/api/v1/persistentvolumes/pv1")] = (200, {"metadata": {"resourceVersion": "9"}})
    await client.bind_volumes(_pod(nodeName="n1"), [("ns/dyn", ""), ("ns/static", "pv1")])
    patches = {c[1]: c[2] for c in calls if c[0] == "PATCH"}
    dyn = patches["/api/v1/namespaces/ns/persistentvolumeclaims/dyn"]
    assert dyn["metadata"]["annotations"] == {"volume.kubernetes.io/selected-node": "n1"}
    pv = patches["/api/v1/persistentvolumes/pv1"]
    assert pv["spec"]["claimRef"]["uid"] == "pvc-uid" and pv["metadata"]["resourceVersion"] == "9"
    with pytest.raises(ApiError):
        await client.bind_volumes(_pod(), [("ns/dyn", "")])  # no node chosen


async def test_bind_volumes_reads_the_pv_claim_ref(server: Any) -> None:
    """A PV already bound to the claim is left alone; one claimed by another claim is a Conflict."""
    client, calls = server
    client.responses[("GET", "/api/v1/namespaces/ns/persistentvolumeclaims/static")] = (
        200,
        {"metadata": {"name": "static", "namespace": "ns", "uid": "pvc-uid", "resourceVersion": "3"}},
    )
    mine = {"claimRef": {"namespace": "ns", "name": "static", "uid": "pvc-uid"}}
    client.responses[("GET", "/api/v1/persistentvolumes/pv1")] = (
        200,
        {"metadata": {"name": "pv1"}, "spec": mine},
    )
    await client.bind_volumes(_pod(nodeName="n1"), [("ns/static", "pv1")])
    assert [c for c in calls if c[0] == "PATCH"] == []
    theirs = {"claimRef": {"namespace": "other", "name": "data", "uid": "u2"}}
    client.responses[("GET", "/api/v1/persistentvolumes/pv1")] = (
        200,
        {"metadata": {"name": "pv1"}, "spec": theirs},
    )
    with pytest.raises(Conflict, match="already claimed by other/data"):
        await client.bind_volumes(_pod(nodeName="n1"), [("ns/static", "pv1")])
    assert [c for c in calls if c[0] == "PATCH"] == []


async def test_failed_scheduling_note_is_truncated_but_not_the_condition(server: Any) -> None:
    client, calls = server
    message = "y" * 5000
    await client.record_failed(_pod(), "Unschedulable", message)
    by_path = {c[1]: c for c in calls}
    note = by_path["/apis/events.k8s.io/v1/namespaces/ns/events"][2]["note"]
    assert len(note) == 1024 and note.endswith(" ...") and note.startswith("y" * 1020)
    cond = by_path["/api/v1/namespaces/ns/pods/p/status"][2]["status"]["conditions"][0]
    assert cond["message"] == message


# --- health -------------------------------------------------------------------------------------


def test_healthz_fails_when_the_loop_is_stuck() -> None:
    import socket
    import time
    import urllib.error
    import urllib.request

    from kopf_scheduler.cluster import metrics

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    health = metrics.Health(stuck_after=5.0)
    server = metrics.serve(health, "127.0.0.1", port)

    def get(path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    try:
        assert get("/healthz") == 200
        assert get("/readyz") == 503
        health.ready = True
        assert get("/readyz") == 200
        health.beat = time.monotonic() - 6.0  # no heartbeat for 6 s: the loop is blocked
        assert get("/healthz") == 500
        health.beat = time.monotonic()
        health.checks["scheduling"] = lambda: "ended: RuntimeError()"
        assert get("/healthz") == 500
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        assert "scheduler_bind_errors_total" in text
        # The engine's metrics are served with kube-scheduler's names and types, and none of
        # prometheus-client's ``_created`` series (kube-scheduler has none).
        assert "# TYPE scheduler_framework_extension_point_duration_seconds histogram" in text
        assert 'scheduler_pending_pods{queue="gated"}' in text
        assert "_created" not in text
        assert "scheduler_pod_scheduling_duration_seconds" not in text  # not a v1.37 metric
    finally:
        metrics.stop(server)


async def test_profile_resync_retries_a_fresh_apiservers_429() -> None:
    """Right after an apiserver start a CRD answers 429 "storage is (re)initializing" for a while;
    the first resync must wait that out, not end the scheduling loop."""
    from kopf_scheduler.cluster.runtime import PROFILES_PATH, Options, SchedulerRuntime

    answers = [
        (429, {"kind": "Status", "message": "storage is (re)initializing", "code": 429}),
        (503, {"kind": "Status", "message": "unavailable", "code": 503}),
        (200, {"kind": "SchedulerProfileList", "metadata": {"resourceVersion": "5"}, "items": []}),
    ]
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.path)
        status, payload = answers.pop(0)
        return web.json_response(payload, status=status)

    runner, creds = await _fake_apiserver(handle, "GET", PROFILES_PATH)
    runtime = SchedulerRuntime(Options(standalone=True, metrics_port=None), credentials=creds)
    try:
        await runtime.resync_profiles()
        assert seen == [PROFILES_PATH] * 3 and not answers
        # A 403 is not transient: raised at once.
        answers.append((403, {"kind": "Status", "message": "forbidden", "code": 403}))
        with pytest.raises(ApiError) as info:
            await runtime.resync_profiles()
        assert info.value.status == 403 and len(seen) == 4
    finally:
        await runtime.api.close()
        await runner.cleanup()


async def test_a_leading_replica_lists_its_profiles_beside_the_informers() -> None:
    """Standalone (leading from the start), the first SchedulerProfile listing is not left for after
    the informers' sync: it is asked while the Node listing is still unanswered (on the way to the
    first bind, its round trip overlaps theirs)."""
    from kopf_scheduler.cluster.runtime import PROFILES_PATH, Options, SchedulerRuntime

    release = asyncio.Event()
    synced_when_asked: list[bool] = []
    runtime: SchedulerRuntime | None = None

    async def handle(request: web.Request) -> web.Response:
        if request.path == "/api/v1/nodes" and "watch" not in request.query:
            await release.wait()  # the informers cannot sync before the profiles are asked
        if request.path == PROFILES_PATH and "watch" not in request.query:
            assert runtime is not None
            synced_when_asked.append(runtime.synced.is_set())
            release.set()
        if "watch" in request.query or (request.path.count("/") <= 3 and "limit" not in request.query):
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response({"kind": "List", "metadata": {"resourceVersion": "1"}, "items": []})

    runner, creds = await _fake_apiserver(handle)
    runtime = SchedulerRuntime(Options(standalone=True, metrics_port=None), credentials=creds)
    try:
        await runtime.start()
        await asyncio.wait_for(runtime.synced.wait(), 5)
        await asyncio.wait_for(release.wait(), 5)
        assert synced_when_asked == [False]
    finally:
        release.set()  # a held handler would hold the server's cleanup
        await runtime.stop(drain_timeout=1)
        await runtime.api.close()
        await runner.cleanup()


def test_run_imports_kopf_without_the_optional_clients() -> None:
    """The start-up shortcut blocks kubernetes/pykube only while Kopf imports, then gets out of the way."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from kopf_scheduler.cluster import run\n"
        "with run._without_optional_clients():\n"
        "    import kopf\n"
        "    from kopf_scheduler.cluster import operator\n"
        "assert 'kubernetes' not in sys.modules and 'pykube' not in sys.modules, sorted(sys.modules)\n"
        "import kubernetes.config\n"  # importable again afterwards: connection.py loads credentials with it
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


async def test_bound_node_reads_the_pod_back_and_checks_its_uid(server: Any) -> None:
    client, _ = server
    path = "/api/v1/namespaces/ns/pods/p"
    client.responses[("GET", path)] = (200, {"metadata": {"uid": "uid-1"}, "spec": {"nodeName": "n3"}})
    assert await client.bound_node(_pod()) == "n3"
    client.responses[("GET", path)] = (200, {"metadata": {"uid": "uid-2"}, "spec": {"nodeName": "n3"}})
    assert await client.bound_node(_pod()) == ""  # a recreated pod of that name is not ours
    client.responses[("GET", path)] = (200, {"metadata": {"uid": "uid-1"}, "spec": {}})
    assert await client.bound_node(_pod()) == ""
    client.responses[("GET", path)] = (404, {"message": "gone"})
    with pytest.raises(NotFound):
        await client.bound_node(_pod())


# --- plugin objects: informers and RBAC -----------------------------------------------------------


def test_every_plugin_object_informer_is_allowed_by_the_cluster_role() -> None:
    """The 1.37 volume plugins read CSIDriver, VolumeAttachment and CSIStorageCapacity: the edge
    lists+watches them, and the manifests' ClusterRole lets the ServiceAccount do so."""
    from pathlib import Path

    import yaml

    from kopf_scheduler.cluster.runtime import OBJECT_KINDS

    paths = {k.kind: k.path for k in OBJECT_KINDS}
    assert paths["CSIDriver"] == "/apis/storage.k8s.io/v1/csidrivers"
    assert paths["VolumeAttachment"] == "/apis/storage.k8s.io/v1/volumeattachments"
    assert paths["CSIStorageCapacity"] == "/apis/storage.k8s.io/v1/csistoragecapacities"
    rbac = Path(__file__).resolve().parents[2] / "manifests" / "10-rbac.yaml"
    role = next(d for d in yaml.safe_load_all(rbac.read_text()) if d and d["kind"] == "ClusterRole")
    for kind, path in paths.items():
        parts = path.strip("/").split("/")
        group, resource = ("" if parts[0] == "api" else parts[1]), parts[-1]
        verbs = {
            v
            for rule in role["rules"]
            if group in rule["apiGroups"] and resource in rule["resources"]
            for v in rule["verbs"]
        }
        assert {"list", "watch"} <= verbs, kind
