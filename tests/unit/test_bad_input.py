"""Malformed input at the engine level: each bad object is reported, everything else still schedules.

The real apiserver validates pods and nodes itself (operators, negative quantities, types), so most
of this garbage can only reach the engine through ``simulate`` or an apiserver that validates less.
These tests drive the operator's own edge code offline: the pod/node informers (``_apply`` of watch
events), ``SchedulerRuntime._invalid_pod`` and the real ``Scheduler``, with an in-memory client in
place of the HTTP one. Cases the real apiserver does let through are in
``tests/integration/test_bad_input_cluster.py``.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler.api.objects import parse_pod
from kopf_scheduler.api.types import ObjectError
from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials
from kopf_scheduler.cluster.runtime import Options, SchedulerRuntime
from kopf_scheduler.simulate import SimulationError, load_documents, simulate
from kopf_scheduler_workbench.testing.builders import node_dict, pod_dict
from kopf_scheduler_workbench.testing.fake_client import FakeClusterClient
from kopf_scheduler_workbench.testing.invariants import ClusterState, check

Mutation = Callable[[dict[str, Any]], None]


def _requests(**req: Any) -> Mutation:
    def mutate(pod: dict[str, Any]) -> None:
        pod["spec"]["containers"][0]["resources"] = {"requests": req}

    return mutate


def _spec(**fields: Any) -> Mutation:
    def mutate(pod: dict[str, Any]) -> None:
        pod["spec"].update(fields)

    return mutate


def _node_affinity_op(op: str) -> Mutation:
    term = {"matchExpressions": [{"key": "zone", "operator": op, "values": ["a"]}]}
    return _spec(
        affinity={
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    )


def _anti_affinity_op(op: str) -> Mutation:
    term = {
        "labelSelector": {"matchExpressions": [{"key": "app", "operator": op, "values": ["a"]}]},
        "topologyKey": "kubernetes.io/hostname",
    }
    return _spec(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})


# (case id, mutation, the field path the report must name)
MALFORMED_PODS: list[tuple[str, Mutation, str]] = [
    ("garbage-cpu", _requests(cpu="lots"), "spec.containers[0].resources.requests.cpu"),
    ("garbage-memory", _requests(memory="12 GB"), "spec.containers[0].resources.requests.memory"),
    ("negative-cpu", _requests(cpu="-1"), "spec.containers[0].resources.requests.cpu"),
    ("negative-extended", _requests(**{"example.com/gpu": "-2"}), "spec.containers[0].resources.requests"),
    ("requests-not-an-object", _requests(), "spec.containers[0].resources"),
    (
        "node-affinity-operator",
        _node_affinity_op("Near"),
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].operator",
    ),
    (
        "anti-affinity-operator",
        _anti_affinity_op("Like"),
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
        ".matchExpressions[0].operator",
    ),
    (
        "toleration-operator",
        _spec(tolerations=[{"key": "k", "operator": "Maybe"}]),
        "spec.tolerations[0].operator",
    ),
    (
        "spread-max-skew",
        _spec(
            topologySpreadConstraints=[
                {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
            ]
        ),
        "spec.topologySpreadConstraints[0].maxSkew",
    ),
    (
        "spread-when",
        _spec(
            topologySpreadConstraints=[
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Sometimes"}
            ]
        ),
        "spec.topologySpreadConstraints[0].whenUnsatisfiable",
    ),
    ("containers-not-a-list", _spec(containers={"name": "c"}), "spec.containers"),
    ("label-not-a-string", lambda p: p["metadata"]["labels"].update(n=1), "metadata.labels.n"),
]


def _fix_requests_not_an_object(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["resources"] = {"requests": "1 cpu please"}


MALFORMED_PODS = [
    (case, _fix_requests_not_an_object if case == "requests-not-an-object" else m, path)
    for case, m, path in MALFORMED_PODS
]


def _bad(case: str, mutate: Mutation) -> dict[str, Any]:
    raw = pod_dict(f"bad-{case}", cpu="100m", uid=f"uid-bad-{case}", labels={"app": "x"})
    raw["metadata"]["resourceVersion"] = "1"
    mutate(raw)
    return raw


@pytest.mark.parametrize(("case", "mutate", "path"), MALFORMED_PODS, ids=[c[0] for c in MALFORMED_PODS])
def test_parser_names_the_field(case: str, mutate: Mutation, path: str) -> None:
    with pytest.raises(ObjectError) as info:
        parse_pod(_bad(case, mutate))
    assert info.value.path.startswith(path), info.value


# --- the operator's edge, offline -------------------------------------------------------------------


class Edge:
    """A SchedulerRuntime with the in-memory client; watch events are fed to its informers."""

    def __init__(self) -> None:
        creds = Credentials(ConnectionInfo(server="https://127.0.0.1:9"))
        self.client = FakeClusterClient()
        options = Options(standalone=True, metrics_port=None, identity="unit")
        self.rt = SchedulerRuntime(options, creds, client=self.client)  # type: ignore[arg-type]
        self.statuses: dict[str, dict[str, Any]] = {}

        async def write_status(name: str, status: dict[str, Any]) -> None:
            self.statuses[name] = status

        self.rt.controller.write_status = write_status
        self.raw: dict[str, dict[str, Any]] = {}
        self.client.on_bind = self._bound

    def _bound(self, pod: Any, node_name: str) -> None:
        raw = copy.deepcopy(self.raw[pod.key])
        raw["spec"]["nodeName"] = node_name
        self.pod("MODIFIED", raw)

    def pod(self, kind: str, raw: dict[str, Any]) -> None:
        meta = raw["metadata"]
        self.raw[f"{meta['namespace']}/{meta['name']}"] = raw
        self.rt.pods._apply({"type": kind, "object": raw})

    def node(self, raw: dict[str, Any]) -> None:
        self.rt.nodes._apply({"type": "ADDED", "object": raw})

    async def drain(self) -> None:
        for _ in range(1000):
            if not await self.rt.scheduler.schedule_one():
                break
            await self.rt.scheduler.wait_for_bindings()
        await self.rt.scheduler.wait_for_bindings()
        for name, task in list(self.rt._tasks.items()):
            if name.startswith("report-"):
                await task

    def state(self) -> ClusterState:
        pods = []
        for key, raw in self.raw.items():
            raw = copy.deepcopy(raw)
            if key in self.client.bindings:
                raw["spec"]["nodeName"] = self.client.bindings[key]
            elif key in self.client.conditions:
                reason, message = self.client.conditions[key]
                raw["status"]["conditions"] = [
                    {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
                ]
            pods.append(raw)
        return ClusterState(
            pods=pods, nodes=[raw for _, (_, n) in self.rt.nodes.store.items() for raw in [n.raw]]
        )

    async def close(self) -> None:
        await self.rt.api.close()


@pytest.fixture
async def edge() -> Any:
    e = Edge()
    try:
        yield e
    finally:
        await e.close()


async def test_malformed_pods_are_reported_and_the_rest_schedules(edge: Edge) -> None:
    edge.node(node_dict("n1", cpu="4"))
    edge.node(node_dict("n2", cpu="4"))
    for case, mutate, _ in MALFORMED_PODS:
        edge.pod("ADDED", _bad(case, mutate))
    good = [pod_dict(f"good-{i}", cpu="500m", uid=f"uid-good-{i}") for i in range(12)]
    for raw in good:
        edge.pod("ADDED", raw)
    await edge.drain()

    bound = {k for k in edge.client.bindings}
    assert bound == {f"default/good-{i}" for i in range(12)}
    for case, _, path in MALFORMED_PODS:
        key = f"default/bad-{case}"
        assert key not in edge.client.bindings
        reason, message = edge.client.conditions[key]
        assert reason == "SchedulerError"
        assert message.startswith(f"invalid pod: {path}"), message
        assert edge.client.failed_messages(key) == [message]
    report = check(edge.state())
    assert report.ok, report.summary()
    assert report.bound == 12


async def test_invalid_pod_is_reported_once_per_resource_version(edge: Edge) -> None:
    edge.node(node_dict("n1"))
    raw = _bad("garbage-cpu", _requests(cpu="lots"))
    edge.pod("ADDED", raw)
    edge.pod("MODIFIED", copy.deepcopy(raw))  # same resourceVersion: a re-list, not an edit
    await edge.drain()
    assert len(edge.client.failed_messages("default/bad-garbage-cpu")) == 1
    edited = copy.deepcopy(raw)
    edited["metadata"]["resourceVersion"] = "2"
    edge.pod("MODIFIED", edited)
    await edge.drain()
    assert len(edge.client.failed_messages("default/bad-garbage-cpu")) == 2


async def test_fixing_a_malformed_pod_schedules_it(edge: Edge) -> None:
    edge.node(node_dict("n1"))
    raw = _bad("garbage-cpu", _requests(cpu="lots"))
    edge.pod("ADDED", raw)
    await edge.drain()
    fixed = copy.deepcopy(raw)
    fixed["metadata"]["resourceVersion"] = "2"
    fixed["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    edge.pod("MODIFIED", fixed)
    await edge.drain()
    assert edge.client.bindings == {"default/bad-garbage-cpu": "n1"}


async def test_malformed_node_is_ignored_and_pods_go_elsewhere(edge: Edge) -> None:
    bad = node_dict("broken", cpu="lots")
    edge.node(bad)
    edge.node(node_dict("ok", cpu="2"))
    assert "broken" not in edge.rt.nodes.store
    for i in range(3):
        edge.pod("ADDED", pod_dict(f"p{i}", cpu="500m", uid=f"uid-p{i}"))
    await edge.drain()
    assert set(edge.client.bindings.values()) == {"ok"}
    assert len(edge.client.bindings) == 3


async def test_pod_for_an_unknown_profile_is_left_alone(edge: Edge) -> None:
    """kube-scheduler's rule: a schedulerName no profile serves belongs to someone else; no event."""
    edge.node(node_dict("n1"))
    edge.pod("ADDED", pod_dict("stranger", uid="uid-stranger", scheduler_name="no-such-profile"))
    garbage = _bad("garbage-cpu", _requests(cpu="lots"))
    garbage["spec"]["schedulerName"] = "no-such-profile"
    edge.pod("ADDED", garbage)
    edge.pod("ADDED", pod_dict("mine", uid="uid-mine"))
    await edge.drain()
    assert edge.client.bindings == {"default/mine": "n1"}
    assert [e.pod for e in edge.client.events] == ["default/mine"]
    assert "uid-stranger" not in edge.rt.queue


async def test_huge_label_sets_schedule(edge: Edge) -> None:
    """5,000 labels on pods and nodes, and an anti-affinity selector with 200 expressions."""
    many = {f"k{i}.example.com/label-{i}": f"v{i}" for i in range(5000)}
    for n in range(3):
        raw = node_dict(f"n{n}", labels=many)
        edge.node(raw)
    exprs = [
        {"key": f"k{i}.example.com/label-{i}", "operator": "In", "values": [f"v{i}"]} for i in range(200)
    ]
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchExpressions": exprs}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    for i in range(4):
        edge.pod("ADDED", pod_dict(f"big-{i}", uid=f"uid-big-{i}", labels=many, affinity=anti))
    await edge.drain()
    assert len(edge.client.bindings) == 3
    assert len(set(edge.client.bindings.values())) == 3
    _, message = edge.client.conditions["default/big-3"]
    assert "didn't match pod anti-affinity rules" in message
    report = check(edge.state())
    assert report.ok, report.summary()


def _profile(generation: int, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kopfscheduler.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": {"name": "custom", "generation": generation, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec,
    }


INVALID_PROFILE_EDITS: list[tuple[str, dict[str, Any], str]] = [
    (
        "unknown-plugin",
        {"schedulerName": "custom", "plugins": {"score": {"enabled": [{"name": "NoSuchPlugin"}]}}},
        "spec.plugins",
    ),
    (
        "bad-strategy",
        {
            "schedulerName": "custom",
            "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Bogus"}}}],
        },
        "spec.pluginConfig",
    ),
    ("unknown-field", {"schedulerName": "custom", "plugins": {"filtre": {}}}, "spec.plugins"),
    (
        "wrong-type",
        {"schedulerName": "custom", "percentageOfNodesToScore": "many"},
        "spec.percentageOfNodesToScore",
    ),
]


@pytest.mark.parametrize(
    ("case", "spec", "field"), INVALID_PROFILE_EDITS, ids=[c[0] for c in INVALID_PROFILE_EDITS]
)
async def test_invalid_profile_edit_keeps_the_last_valid_one(
    edge: Edge, case: str, spec: dict[str, Any], field: str
) -> None:
    edge.node(node_dict("n1"))
    status = await edge.rt.controller.apply(_profile(1, {"schedulerName": "custom"}))
    assert status["conditions"][0]["status"] == "True"
    status = await edge.rt.controller.apply(_profile(2, spec))
    cond = status["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "InvalidProfile")
    assert field in cond["message"], cond["message"]
    assert status["activeGeneration"] == 1
    assert edge.statuses["custom"] == status
    edge.pod("ADDED", pod_dict("c1", uid="uid-c1", scheduler_name="custom"))
    edge.pod("ADDED", pod_dict("d1", uid="uid-d1"))
    await edge.drain()
    assert edge.client.bindings == {"default/c1": "n1", "default/d1": "n1"}


# --- simulate -----------------------------------------------------------------------------------------


def test_simulate_names_file_document_and_field(tmp_path: Path) -> None:
    """Offline, a bad document stops the run with a message a person can act on."""
    path = tmp_path / "in.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: '1'}}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  schedulerName: kopf-scheduler\n"
        "  containers: [{name: c, resources: {requests: {cpu: '-1'}}}]\n"
    )
    with pytest.raises(SimulationError) as info:
        load_documents([str(path)])
    assert str(info.value).startswith(
        f"{path}: document 1 (Pod p): spec.containers[0].resources.requests.cpu:"
    )


async def test_simulate_reports_pods_of_unknown_profiles(tmp_path: Path) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n"
        "status: {allocatable: {cpu: '1', pods: '10'}}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: lost}\n"
        "spec: {schedulerName: nobody, containers: [{name: c}]}\n"
        "---\napiVersion: v1\nkind: Pod\nmetadata: {name: ok}\n"
        "spec: {schedulerName: kopf-scheduler, containers: [{name: c}]}\n"
    )
    outcomes = {o.name: o for o in await simulate(load_documents([str(path)]), seed=0)}
    assert outcomes["lost"].node == ""
    assert outcomes["lost"].message == "no profile for schedulerName 'nobody'"
    assert outcomes["ok"].node == "n"


# --- typed-field garbage and pathological quantities (were defects; fixed in api/) -------------------


@pytest.mark.parametrize(
    "mutate",
    [
        _spec(priority="high"),
        _spec(tolerations=[{"key": "k", "operator": "Exists", "tolerationSeconds": "soon"}]),
        lambda p: p["metadata"].update(creationTimestamp="yesterday"),
        _requests(cpu=["1"]),
    ],
    ids=["priority", "tolerationSeconds", "creationTimestamp", "quantity-list"],
)
def test_typed_field_garbage_is_an_object_error(mutate: Mutation) -> None:
    """A plain ValueError escapes the informer's ``except ObjectError`` and ends its task."""
    raw = _bad("typed", mutate)
    try:
        parse_pod(raw)
    except ObjectError:
        return
    except (ValueError, TypeError) as exc:
        pytest.fail(f"{type(exc).__name__} instead of ObjectError: {exc}")
    pytest.fail("parsed")


def test_huge_exponent_quantity_parses_in_bounded_time() -> None:
    """kube-apiserver v1.37 stores ``cpu: 1e5000000`` (as ``100e4999998``); parsing it must not freeze
    the event loop (today: ~30 s of big-integer arithmetic on every parse)."""
    code = "from kopf_scheduler.api.quantity import milli_value; milli_value('100e4999998')"
    try:
        subprocess.run([sys.executable, "-c", code], timeout=3, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("parsing took more than 3 s")


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("1e50", 2**63 - 1),
        ("-1e50", -(2**63 - 1)),
        ("1e-50", 1),
        ("0e99999", 0),
        ("100m", 100),
        ("1.5", 1500),
    ],
)
def test_extreme_quantities_saturate_within_int64(text: str, milli: int) -> None:
    from kopf_scheduler.api.quantity import milli_value

    assert milli_value(text) == milli


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), ["1"], {"cpu": 1}])
def test_non_quantities_are_quantity_errors(bad: object) -> None:
    from kopf_scheduler.api.quantity import QuantityError, parse_quantity

    with pytest.raises(QuantityError):
        parse_quantity(bad)  # type: ignore[arg-type]


async def test_invalid_pod_memory_is_bounded(edge: Edge, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleted invalid pods leave no trace in the informer, so the once-per-version memory is capped."""
    from kopf_scheduler.cluster import runtime as op

    monkeypatch.setattr(op, "INVALID_REPORTED_MAX", 3)
    edge.node(node_dict("n1"))
    for i in range(5):
        raw = _bad(f"garbage-{i}", _requests(cpu="lots"))
        raw["metadata"]["uid"] = f"uid-bad-{i}"
        edge.pod("ADDED", raw)
    await edge.drain()
    assert list(edge.rt._invalid_reported) == ["uid-bad-2", "uid-bad-3", "uid-bad-4"]
    assert all(len(edge.client.failed_messages(f"default/bad-garbage-{i}")) == 1 for i in range(5))
