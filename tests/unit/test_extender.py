"""HTTP scheduler extenders: the JSON bodies (kube-scheduler v1.37.2's extender/v1 shapes), the rules
for merging what extenders answer (filters in turn, weighted scores, binding, preemption), and the
scheduler with a real extender on a real socket: FailedScheduling notes, errors, ignorable ones."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.podgroup import parse_pod_group
from kopf_scheduler.cluster.extender import (
    HTTPExtender,
    bind_args,
    build_extenders,
    decode_json,
    filter_args,
    parse_filter_result,
    parse_host_priority_list,
    parse_preemption_result,
    preemption_args,
)
from kopf_scheduler.config.kubescheduler import ExtenderConfig, ExtenderTLSConfig
from kopf_scheduler.engine import Engine, new_engine
from kopf_scheduler.framework.diagnosis import NodeToStatus
from kopf_scheduler.framework.extender import (
    EXTENDER_NAME,
    ExtenderError,
    FilterResult,
    MetaVictims,
    Victims,
    extender_scores,
    extenders_binding,
    find_nodes_that_pass_extenders,
    process_preemption,
    uses_managed_resources,
)
from kopf_scheduler.framework.interface import Code
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler_workbench.testing.builders import make_node, make_pod, pod_dict

# --- the bodies ----------------------------------------------------------------------------------


def infos(*names: str, cpu: str = "4") -> list[NodeInfo]:
    out = []
    for name in names:
        info = NodeInfo()
        info.set_node(make_node(name, cpu=cpu))
        out.append(info)
    return out


def test_filter_and_prioritize_bodies_carry_nodes_or_only_their_names() -> None:
    pod = make_pod("p", cpu="1")
    nodes = infos("n1", "n2")
    full = filter_args(pod, nodes, node_cache_capable=False)
    assert set(full) == {"Pod", "Nodes", "NodeNames"}
    # objects as client-go's informers hold them: no apiVersion/kind
    bare_pod = {k: v for k, v in pod.raw.items() if k not in ("apiVersion", "kind")}
    assert full["Pod"] == bare_pod and full["NodeNames"] is None and "kind" in pod.raw
    # a v1.NodeList with no TypeMeta: only metadata (empty) and the Nodes
    items = [{k: v for k, v in n.node.raw.items() if k not in ("apiVersion", "kind")} for n in nodes]  # type: ignore[union-attr]
    assert full["Nodes"] == {"metadata": {}, "items": items}
    names = filter_args(pod, nodes, node_cache_capable=True)
    assert names == {"Pod": bare_pod, "Nodes": None, "NodeNames": ["n1", "n2"]}


def test_bind_and_preemption_bodies() -> None:
    pod = make_pod("p", "ns", uid="u-p")
    assert bind_args(pod, "n1") == {"PodName": "p", "PodNamespace": "ns", "PodUID": "u-p", "Node": "n1"}
    victim = make_pod("v", uid="u-v")
    victims = {"n1": Victims([victim], 1)}
    bare = {k: v for k, v in pod.raw.items() if k not in ("apiVersion", "kind")}
    bare_victim = {k: v for k, v in victim.raw.items() if k not in ("apiVersion", "kind")}
    assert preemption_args(pod, victims, node_cache_capable=True) == {
        "Pod": bare,
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "u-v"}], "NumPDBViolations": 1}},
    }
    assert preemption_args(pod, victims, node_cache_capable=False) == {
        "Pod": bare,
        "NodeNameToVictims": {"n1": {"Pods": [bare_victim], "NumPDBViolations": 1}},
        "NodeNameToMetaVictims": None,
    }


def test_answers_are_read_as_encoding_json_reads_them() -> None:
    # keys match case-insensitively; null maps and lists are empty
    got = parse_filter_result(
        {"nodenames": ["a"], "failedNodes": {"b": "no gpu"}, "FailedAndUnresolvableNodes": None}, True
    )
    assert got == FilterResult(["a"], {"b": "no gpu"}, {})
    # NodeNames counts only for a node-cache-capable extender; otherwise Nodes' items
    nodes = {"Nodes": {"items": [{"metadata": {"name": "c"}}]}, "NodeNames": ["a"]}
    assert parse_filter_result(nodes, False).node_names == ["c"]
    assert parse_filter_result(nodes, True).node_names == ["a"]
    assert parse_filter_result({"NodeNames": ["a"]}, False).node_names == []
    with pytest.raises(ExtenderError, match=r"^out of gpus$"):
        parse_filter_result({"Error": "out of gpus", "NodeNames": ["a"]}, True)
    assert parse_host_priority_list([{"host": "a", "score": 3}, {"Host": "b"}]) == [("a", 3), ("b", 0)]
    assert parse_preemption_result(
        {"NodeNameToMetaVictims": {"a": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 2}, "b": None}}
    ) == {"a": MetaVictims(["u1"], 2), "b": MetaVictims([])}
    assert parse_preemption_result(None) == {}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "EOF"),
        (b"  \n", "EOF"),
        (b'{"NodeNames": ["a"', "unexpected EOF"),
        (b"<html>", "invalid character '<' looking for beginning of value"),
        (b'{"NodeNames": x}', "invalid character 'x' looking for beginning of value"),
        (b"{'a': 1}", "invalid character '\\'' looking for beginning of object key string"),
    ],
)
def test_a_body_that_is_no_json_fails_in_encoding_jsons_words(body: bytes, message: str) -> None:
    with pytest.raises(ExtenderError) as err:
        decode_json(body)
    assert str(err.value) == message


def test_only_the_first_json_value_is_read_and_types_are_checked() -> None:
    assert decode_json(b'{"Error": ""}\ngarbage') == {"Error": ""}
    with pytest.raises(ExtenderError) as err:
        parse_host_priority_list([{"Host": "a", "Score": "high"}])
    assert (
        str(err.value)
        == "json: cannot unmarshal string into Go struct field HostPriority.Score of type int64"
    )
    with pytest.raises(ExtenderError) as err:
        parse_host_priority_list({"Host": "a"})
    assert str(err.value) == "json: cannot unmarshal object into Go value of type v1.HostPriorityList"


def test_managed_resources_pick_the_pods_sent() -> None:
    from kopf_scheduler.api.objects import parse_pod

    def parsed_only(pod: Pod) -> Pod:
        pod.raw = {}  # the parsed containers are all it reads
        return pod

    managed = frozenset({"example.com/gpu"})
    assert uses_managed_resources(parsed_only(make_pod("a")), frozenset())
    assert not uses_managed_resources(parsed_only(make_pod("a", cpu="1")), managed)
    assert uses_managed_resources(parsed_only(make_pod("a", resources={"example.com/gpu": "1"})), managed)
    limits = [{"name": "c", "image": "i", "resources": {"limits": {"example.com/gpu": "1"}}}]
    assert uses_managed_resources(parsed_only(make_pod("a", containers=limits)), managed)
    init = pod_dict("a")
    init["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"example.com/gpu": "1"}}}]
    assert uses_managed_resources(parsed_only(parse_pod(init)), managed)


def test_ignorable_extenders_are_asked_last_and_bad_tls_files_fail_in_the_references_words() -> None:
    a = ExtenderConfig("http://a", ignorable=True)
    b = ExtenderConfig("http://b")
    assert [e.name for e in build_extenders([a, b])] == ["http://b", "http://a"]
    from kopf_scheduler.cluster.extender import ExtenderBuildError

    bad = [
        (
            ExtenderTLSConfig(insecure=True, ca_file="/x"),
            "specifying a root certificates file with the insecure flag",
        ),
        (ExtenderTLSConfig(ca_file="/nonexistent"), "open /nonexistent: no such file or directory"),
        (
            ExtenderTLSConfig(ca_data=b"hello"),
            "unable to load root certificates: unable to parse bytes as PEM block",
        ),
        (
            ExtenderTLSConfig(cert_data=b"x", key_data=b"y"),
            "tls: failed to find any PEM data in certificate input",
        ),
    ]
    for tls, message in bad:
        with pytest.raises(ExtenderBuildError) as err:
            build_extenders([ExtenderConfig("https://a", tls_config=tls)])
        assert str(err.value).startswith(f"couldn't build extenders: {message}")


# --- the merging rules, on extenders in memory --------------------------------------------------


class Memory:
    """An Extender in memory: what each verb answers is given by the test."""

    def __init__(
        self,
        name: str,
        *,
        keep: Sequence[str] | None = None,
        failed: Mapping[str, str] | None = None,
        unresolvable: Mapping[str, str] | None = None,
        scores: Mapping[str, int] | None = None,
        weight: int = 1,
        error: str = "",
        ignorable: bool = False,
        managed: frozenset[str] = frozenset(),
        binder: bool = False,
        preempt: Callable[[Mapping[str, Victims]], dict[str, MetaVictims]] | None = None,
    ) -> None:
        self.name = name
        self.keep, self.failed, self.unresolvable = keep, dict(failed or {}), dict(unresolvable or {})
        self.scores, self.weight, self.error = scores, weight, error
        self.ignorable, self.managed, self.binder, self.preempt = ignorable, managed, binder, preempt
        self.seen: list[list[str]] = []
        self.bound: list[tuple[str, str]] = []

    def is_ignorable(self) -> bool:
        return self.ignorable

    def is_filter(self) -> bool:
        return self.keep is not None

    def is_prioritizer(self) -> bool:
        return self.scores is not None

    def is_binder(self) -> bool:
        return self.binder

    def supports_preemption(self) -> bool:
        return self.preempt is not None

    def is_interested(self, pod: Pod) -> bool:
        return uses_managed_resources(pod, self.managed)

    def ignored_resources(self) -> list[str]:
        return []

    def _fail(self) -> None:
        if self.error:
            raise ExtenderError(self.error)

    async def filter(self, pod: Pod, nodes: Sequence[NodeInfo]) -> FilterResult:
        self.seen.append([n.name for n in nodes])
        self._fail()
        assert self.keep is not None
        return FilterResult([n for n in self.keep], self.failed, self.unresolvable)

    async def prioritize(self, pod: Pod, nodes: Sequence[NodeInfo]) -> tuple[list[tuple[str, int]], int]:
        self._fail()
        assert self.scores is not None
        return list(self.scores.items()), self.weight

    async def bind(self, pod: Pod, node_name: str) -> None:
        self._fail()
        self.bound.append((pod.key, node_name))

    async def process_preemption(self, pod: Pod, victims: Mapping[str, Victims]) -> dict[str, MetaVictims]:
        self._fail()
        assert self.preempt is not None
        return self.preempt(victims)


async def test_filters_narrow_in_turn_and_their_reasons_become_node_statuses() -> None:
    pod = make_pod("p")
    nodes = infos("a", "b", "c", "d")
    first = Memory("1", keep=["a", "b", "c"], failed={"d": "no gpu"})
    second = Memory("2", keep=["a"], failed={"b": "busy", "c": "busy"}, unresolvable={"c": "wrong zone"})
    third = Memory("3", keep=[])  # drops the last node without a word: no status for it
    statuses = NodeToStatus()
    passed = await find_nodes_that_pass_extenders([first, second, third], pod, nodes, statuses)
    assert passed == []
    assert second.seen == [["a", "b", "c"]] and third.seen == [["a"]]
    assert {n: (s.code, s.reasons, s.plugin) for n, s in statuses.items()} == {
        "d": (Code.UNSCHEDULABLE, ["no gpu"], ""),
        "b": (Code.UNSCHEDULABLE, ["busy"], ""),
        "c": (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ["wrong zone"], ""),  # unresolvable wins
    }
    # the NodeInfos that pass are the ones given (not rebuilt from the answer)
    kept = await find_nodes_that_pass_extenders([first], pod, nodes, NodeToStatus())
    assert kept == nodes[:3] and kept[0] is nodes[0]


async def test_ignorable_and_uninterested_extenders_are_skipped_an_error_or_a_stranger_is_not() -> None:
    pod = make_pod("p")
    nodes = infos("a", "b")
    gpu_only = Memory("gpu", keep=[], managed=frozenset({"example.com/gpu"}))
    broken = Memory("broken", keep=[], error="boom", ignorable=True)
    assert await find_nodes_that_pass_extenders([gpu_only, broken], pod, nodes, NodeToStatus()) == nodes
    with pytest.raises(ExtenderError, match=r"^boom$"):
        await find_nodes_that_pass_extenders([Memory("x", keep=[], error="boom")], pod, nodes, NodeToStatus())
    with pytest.raises(ExtenderError) as err:
        await find_nodes_that_pass_extenders([Memory("http://x", keep=["zz"])], pod, nodes, NodeToStatus())
    assert str(err.value) == (
        'extender "http://x" claims a filtered node "zz" which is not found in the input node list'
    )


async def test_scores_are_weighted_scaled_to_max_node_score_and_summed() -> None:
    pod = make_pod("p")
    nodes = infos("a", "b")
    one = Memory("1", scores={"a": 10, "b": 3}, weight=2)
    two = Memory("2", scores={"b": 5}, weight=1)
    broken = Memory("3", scores={"a": 10}, error="down")  # gives nothing, fails nothing
    assert await extender_scores([one, two, broken], pod, nodes) == {"a": 200, "b": 110}
    assert await extender_scores([Memory("f", keep=[])], pod, nodes) == {}


async def test_the_first_interested_binder_binds() -> None:
    pod = make_pod("p")
    skipped = Memory("gpu", binder=True, managed=frozenset({"example.com/gpu"}))
    broken = Memory("broken", binder=True, error="down", ignorable=True)
    binder = Memory("binder", binder=True)
    assert await extenders_binding([skipped, broken, binder], pod, "n1")
    assert binder.bound == [(pod.key, "n1")] and not skipped.bound
    assert not await extenders_binding([Memory("f", keep=[])], pod, "n1")
    with pytest.raises(ExtenderError, match=r"^down$"):
        await extenders_binding([Memory("x", binder=True, error="down"), binder], pod, "n1")


class Lister:
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self.nodes = {n.name: n for n in nodes}

    def get(self, name: str) -> NodeInfo | None:
        return self.nodes.get(name)


async def test_preemption_candidates_are_narrowed_by_each_extender_in_turn() -> None:
    pod = make_pod("p")
    nodes = infos("a", "b")
    va, vb = make_pod("va", uid="u-a"), make_pod("vb", uid="u-b")
    nodes[0].add_pod(va)
    nodes[1].add_pod(vb)
    victims = {"a": Victims([va]), "b": Victims([vb])}
    only_b = Memory("1", preempt=lambda v: {"b": MetaVictims(["u-b"], 1)})
    got = await process_preemption([only_b], pod, dict(victims), Lister(nodes))  # type: ignore[arg-type]
    assert got == {"b": Victims([vb], 1)}
    wrong = Memory("http://x", preempt=lambda v: {"b": MetaVictims(["u-a"])})
    status = await process_preemption([wrong], pod, dict(victims), Lister(nodes))  # type: ignore[arg-type]
    assert not isinstance(status, dict) and status.code == Code.ERROR
    assert status.message == (
        "extender: http://x claims to preempt pod (UID: &{u-a}) on node: b, "
        "but the pod is not found on that node"
    )
    empty = Memory("e", preempt=lambda v: {"a": MetaVictims([])})
    status = await process_preemption([empty], pod, dict(victims), Lister(nodes))  # type: ignore[arg-type]
    assert not isinstance(status, dict) and status.message == 'expected at least one victim pod on node "a"'
    empty.ignorable = True
    assert await process_preemption([empty], pod, dict(victims), Lister(nodes)) == {}  # type: ignore[arg-type]


# --- the scheduler with an extender on a real socket ---------------------------------------------

Handler = Callable[[dict[str, Any]], Awaitable[Any] | Any]


class ExtenderServer:
    """A small extender over HTTP on 127.0.0.1: each verb answered by a function of the request's
    body (a ``(status, body)`` pair for another code than 200); every call recorded."""

    def __init__(self, **handlers: Handler) -> None:
        self.handlers = handlers
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        verb = request.match_info["verb"]
        body = await request.json()
        self.calls.append((verb, body))
        answer = self.handlers[verb](body)
        if asyncio.iscoroutine(answer):
            answer = await answer
        status = 200
        if isinstance(answer, tuple):
            status, answer = answer
        return web.json_response(answer, status=status)

    async def __aenter__(self) -> ExtenderServer:
        app = web.Application()
        app.router.add_post("/scheduler/{verb}", self._serve)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/scheduler"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    def verbs(self) -> list[str]:
        return [verb for verb, _ in self.calls]


def engine_with(
    *configs: ExtenderConfig, nodes: int = 3, cpu: str = "4"
) -> tuple[Engine, MemoryClusterClient]:
    client = MemoryClusterClient()
    engine = new_engine(client, extenders=build_extenders(configs))

    def bound(pod: Pod, node: str) -> None:
        import dataclasses

        engine.cache.add_pod(dataclasses.replace(pod, node_name=node))

    client.on_bind = bound
    for i in range(nodes):
        engine.cache.add_node(make_node(f"n{i}", cpu=cpu))
    return engine, client


async def schedule(engine: Engine, *pods: Pod) -> None:
    for pod in pods:
        engine.queue.add(pod)
    while await engine.scheduler.schedule_one():
        await engine.scheduler.wait_for_bindings()
    await engine.scheduler.wait_for_bindings()
    for ext in engine.scheduler.extenders:
        await ext.close()  # type: ignore[attr-defined]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_nodes_an_extender_filters_out_are_explained_like_a_plugins() -> None:
    def filter_(args: dict[str, Any]) -> Any:
        names = [n["metadata"]["name"] for n in args["Nodes"]["items"]]
        return {
            "Nodes": {"items": [], "metadata": {}},
            "FailedNodes": {n: "node(s) had no free gpu" for n in names},
        }

    async with ExtenderServer(filter=filter_) as server:
        engine, client = engine_with(ExtenderConfig(server.url, filter_verb="filter"))
        engine.cache.add_node(make_node("small", cpu="1"))
        pod = make_pod("p", cpu="2")
        await schedule(engine, pod)
    # the small node failed NodeResourcesFit and was never sent; the others carry the extender's words
    assert [n["metadata"]["name"] for n in server.calls[0][1]["Nodes"]["items"]] == ["n0", "n1", "n2"]
    assert client.failed_messages(pod.key) == [
        # the extender's rejections are Unschedulable: preemption tries those nodes (and finds no victim)
        "0/4 nodes are available: 1 Insufficient cpu, 3 node(s) had no free gpu. preemption: 0/4 nodes "
        "are available: 1 Preemption is not helpful for scheduling, 3 No preemption victims found for "
        "incoming pod."
    ]
    assert client.conditions[pod.key][0] == "Unschedulable"
    # Extenders register no events: the pod is retried on any (the fake plugin "Extender")
    queued = engine.queue.get(pod.uid)
    assert queued is not None and EXTENDER_NAME in queued.unschedulable_plugins


async def test_an_unreachable_extender_fails_the_cycle_unless_ignorable_and_the_loop_goes_on() -> None:
    port = closed_port()
    url = f"http://127.0.0.1:{port}/scheduler"
    gpu = ExtenderConfig(url, filter_verb="filter", managed_resources=(("example.com/gpu", False),))
    engine, client = engine_with(gpu, cpu="4")
    for i in range(3):
        engine.cache.add_node(make_node(f"g{i}", cpu="4", extra={"example.com/gpu": "1"}))
    wants_gpu = make_pod("gpu", cpu="1", resources={"example.com/gpu": "1"})
    plain = make_pod("plain", cpu="1")  # not sent to an extender managing only gpus
    await schedule(engine, wants_gpu, plain)
    assert client.failed_messages(wants_gpu.key) == [
        f'Post "{url}/filter": dial tcp 127.0.0.1:{port}: connect: connection refused'
    ]
    assert client.conditions[wants_gpu.key][0] == "SchedulerError"
    assert plain.key in client.bindings

    ignorable = ExtenderConfig(url, filter_verb="filter", prioritize_verb="p", weight=1, ignorable=True)
    engine, client = engine_with(ignorable)
    pod = make_pod("p", cpu="1")
    await schedule(engine, pod)
    assert pod.key in client.bindings and not client.failed_messages(pod.key)


async def test_an_extender_that_answers_500_or_too_late_fails_the_cycle_in_the_references_words() -> None:
    async def slow(args: dict[str, Any]) -> Any:
        await asyncio.sleep(1.0)
        return {"NodeNames": args["NodeNames"]}

    async with ExtenderServer(filter=lambda args: (500, {}), slow=slow) as server:
        engine, client = engine_with(ExtenderConfig(server.url, filter_verb="filter"))
        pod = make_pod("p", cpu="1")
        await schedule(engine, pod)
        assert client.failed_messages(pod.key) == [
            f"failed filter with extender at URL {server.url}/filter, code 500"
        ]
        late = ExtenderConfig(server.url, filter_verb="slow", node_cache_capable=True, http_timeout=0.2)
        engine, client = engine_with(late)
        await schedule(engine, pod)
        assert client.failed_messages(pod.key) == [
            f'Post "{server.url}/slow": context deadline exceeded '
            "(Client.Timeout exceeded while awaiting headers)"
        ]


async def test_the_extenders_scores_and_bind_decide() -> None:
    def prioritize(args: dict[str, Any]) -> Any:
        assert args["Nodes"] is None  # node-cache capable: names only
        return [{"Host": n, "Score": 10 if n == "n2" else 0} for n in args["NodeNames"]]

    async with ExtenderServer(prioritize=prioritize, bind=lambda args: {"Error": ""}) as server:
        config = ExtenderConfig(
            server.url, prioritize_verb="prioritize", weight=5, bind_verb="bind", node_cache_capable=True
        )
        engine, client = engine_with(config)
        pods = [make_pod(f"p{i}", cpu="100m") for i in range(3)]
        await schedule(engine, *pods)
    binds = [body for verb, body in server.calls if verb == "bind"]
    # 10 x 5 x 10 = 500 for n2 outweighs every default plugin: all three go there, bound by the extender
    assert sorted(b["PodName"] for b in binds) == ["p0", "p1", "p2"] and {b["Node"] for b in binds} == {"n2"}
    assert binds[0]["PodNamespace"] == "default" and binds[0]["PodUID"] == pods[0].uid
    assert client.bindings == {}  # DefaultBinder was not asked
    assert [e.message for e in client.events if e.reason == "Scheduled"] == [
        f"Successfully assigned {p.key} to n2" for p in pods
    ]
    assert not engine.profiles.get("kopf-scheduler").signatures_enabled  # type: ignore[union-attr]


async def test_an_extenders_bind_error_fails_the_binding_cycle() -> None:
    async with ExtenderServer(bind=lambda args: {"Error": "no room on the device"}) as server:
        engine, client = engine_with(ExtenderConfig(server.url, bind_verb="bind"))
        pod = make_pod("p", cpu="1")
        await schedule(engine, pod)
    assert client.failed_messages(pod.key) == ["no room on the device"]
    assert client.conditions[pod.key][0] == "SchedulerError"


async def test_resources_ignored_by_scheduler_are_left_to_the_extender() -> None:
    pod = make_pod("p", cpu="1", resources={"example.com/foo": "1"})
    engine, client = engine_with()
    await schedule(engine, pod)
    assert client.failed_messages(pod.key)[0].startswith(
        "0/3 nodes are available: 3 Insufficient example.com/foo."
    )
    async with ExtenderServer(filter=lambda args: {"NodeNames": args["NodeNames"][:1]}) as server:
        config = ExtenderConfig(
            server.url,
            filter_verb="filter",
            node_cache_capable=True,
            managed_resources=(("example.com/foo", True),),
        )
        engine, client = engine_with(config)
        await schedule(engine, pod)
    assert client.bindings == {pod.key: server.calls[0][1]["NodeNames"][0]}


async def test_an_extender_narrows_the_preemption_candidates() -> None:
    def preempt(args: dict[str, Any]) -> Any:
        meta = args["NodeNameToMetaVictims"]
        assert args["NodeNameToVictims"] is None and set(meta) == {"n0", "n1", "n2"}
        return {"NodeNameToMetaVictims": {"n1": meta["n1"]}}

    async with ExtenderServer(preempt=preempt) as server:
        config = ExtenderConfig(server.url, preempt_verb="preempt", node_cache_capable=True)
        engine, client = engine_with(config, cpu="2")
        for i in range(3):
            engine.cache.add_pod(make_pod(f"low{i}", cpu="2", node_name=f"n{i}", priority=0))
        high = make_pod("high", cpu="2", priority=100)
        await schedule(engine, high)
    assert client.nominations == {high.key: "n1"}
    assert client.evicted == ["default/low1"]
    assert client.failed_messages(high.key)[0].endswith(
        "preemption: found a potential placement for pod on node n1, preempting 1 victims"
    )


# --- TLS, and the lead's fence -------------------------------------------------------------------


def _server_cert(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for the name extender.test only (no IP SAN)."""
    key, cert = tmp_path / "tls.key", tmp_path / "tls.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "1", "-subj", "/CN=extender.test", "-addext", "subjectAltName=DNS:extender.test",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_extenders_verify_as_the_tls_config_says(tmp_path: Path) -> None:
    cert, key = _server_cert(tmp_path)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(str(cert), str(key))
    app = web.Application()

    async def filter_(request: web.Request) -> web.Response:
        return web.json_response({"NodeNames": (await request.json())["NodeNames"]})

    app.router.add_post("/filter", filter_)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=served)
    await site.start()
    url = f"https://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    pod, nodes = make_pod("p"), infos("a")
    try:
        configs = {
            "CA and serverName": ExtenderConfig(
                url,
                filter_verb="filter",
                node_cache_capable=True,
                tls_config=ExtenderTLSConfig(ca_data=cert.read_bytes(), server_name="extender.test"),
            ),
            "enableHTTPS without a CA: not verified": ExtenderConfig(
                url, filter_verb="filter", node_cache_capable=True, enable_https=True
            ),
        }
        for what, config in configs.items():
            ext = HTTPExtender(config)
            try:
                assert (await ext.filter(pod, nodes)).node_names == ["a"], what
            finally:
                await ext.close()
        unknown = HTTPExtender(ExtenderConfig(url, filter_verb="filter", node_cache_capable=True))
        try:
            with pytest.raises(ExtenderError) as err:
                await unknown.filter(pod, nodes)
        finally:
            await unknown.close()
        assert str(err.value) == (
            f'Post "{url}/filter": tls: failed to verify certificate: '
            "x509: certificate signed by unknown authority"
        )
    finally:
        await runner.cleanup()


async def test_a_replica_that_may_not_act_sends_no_bind() -> None:
    async with ExtenderServer(bind=lambda args: {"Error": ""}) as server:
        ext = HTTPExtender(ExtenderConfig(server.url, bind_verb="bind"), fence=lambda: False)
        with pytest.raises(ExtenderError) as err:
            await ext.bind(make_pod("p"), "n1")
        await ext.close()
    assert str(err.value) == "bind: not sent, this replica does not hold the lead"
    assert server.calls == []


async def test_the_runtime_builds_the_files_extenders_fenced_by_its_lead() -> None:
    """The fence is a constructor parameter (nothing sets it afterwards): a replica that does not
    hold the lead sends no bind through the extenders the operator's runtime built."""

    from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials
    from kopf_scheduler.cluster.runtime import Options, SchedulerRuntime

    async with ExtenderServer(bind=lambda args: {"Error": ""}) as server:
        configured = HTTPExtender(ExtenderConfig(server.url, bind_verb="bind"))
        creds = Credentials(ConnectionInfo(server="http://127.0.0.1:9", token="t0k"))
        runtime = SchedulerRuntime(Options(metrics_port=None, extenders=(configured,)), credentials=creds)
        try:
            (ext,) = runtime.extenders
            assert ext.config is configured.config
            assert ext.name == server.url
            with pytest.raises(ExtenderError, match="this replica does not hold the lead"):
                await ext.bind(make_pod("p"), "n1")
        finally:
            await ext.close()
            await runtime.api.close()
            if runtime.election_api is not None:
                await runtime.election_api.close()
    assert server.calls == []


async def test_a_gangs_members_go_through_the_extenders_too() -> None:
    """A pod group's cycle places each member with the extenders' filter: the gang of 3 fits only on
    the nodes the extender keeps, and binds there whole."""
    from kopf_scheduler.framework.profiles import load_profile

    def filter_(args: dict[str, Any]) -> Any:
        return {"NodeNames": [n for n in args["NodeNames"] if n != "n0"], "FailedNodes": {"n0": "not n0"}}

    gang = load_profile(
        {"schedulerName": "gang", "plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}}
    )
    async with ExtenderServer(filter=filter_) as server:
        client = MemoryClusterClient()
        config = ExtenderConfig(server.url, filter_verb="filter", node_cache_capable=True)
        engine = new_engine(client, [gang], extenders=build_extenders([config]))
        for i in range(4):
            engine.handlers.add_node(make_node(f"n{i}", cpu="1"))
        engine.handlers.add_object(
            "PodGroup",
            parse_pod_group(
                {
                    "apiVersion": "scheduling.k8s.io/v1beta1",
                    "kind": "PodGroup",
                    "metadata": {"name": "g", "namespace": "default", "uid": "pg-g", "generation": 1},
                    "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}, "priority": 0},
                }
            ),
        )
        for i in range(3):
            member = make_pod(
                f"m{i}", cpu="800m", scheduler_name="gang", schedulingGroup={"podGroupName": "g"}
            )
            engine.handlers.add_pod(member)
        await schedule(engine)
    assert sorted(client.bindings.values()) == ["n1", "n2", "n3"]
    assert len([v for v, _ in server.calls if v == "filter"]) == 3
