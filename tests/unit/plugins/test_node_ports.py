"""NodePorts: host port conflicts (0.0.0.0 vs specific IPs, protocols), Skip, hints."""

from __future__ import annotations

from typing import Any

import pytest
from node_plugin_helpers import make_snapshot

from kopf_scheduler.framework.interface import ActionType, Code, CycleState, EventResource, QueueingHint
from kopf_scheduler.plugins.node_ports import NodePorts
from kopf_scheduler_workbench.testing.builders import make_pod

REASON = "node(s) didn't have free ports for the requested pod ports"


def port_pod(*ports: tuple[str, str, int], name: str = "p", **kw: Any) -> Any:
    container = {
        "name": "c",
        "image": "i",
        "ports": [
            {"protocol": proto, "hostIP": ip, "hostPort": port, "containerPort": 80}
            for proto, ip, port in ports
        ],
    }
    return make_pod(name, containers=[container], **kw)


CASES = [
    ("nothing running", [("UDP", "127.0.0.1", 8080)], [], True),
    ("other port", [("UDP", "127.0.0.1", 8080)], [("UDP", "127.0.0.1", 9090)], True),
    ("same udp port", [("UDP", "127.0.0.1", 8080)], [("UDP", "127.0.0.1", 8080)], False),
    ("same tcp port", [("TCP", "127.0.0.1", 8080)], [("TCP", "127.0.0.1", 8080)], False),
    ("different protocol", [("TCP", "127.0.0.1", 8001)], [("UDP", "127.0.0.1", 8001)], True),
    ("different host ip", [("TCP", "127.0.0.1", 8001)], [("TCP", "127.0.0.2", 8001)], True),
    (
        "second port conflicts",
        [("TCP", "127.0.0.1", 8001), ("UDP", "127.0.0.1", 8002)],
        [("UDP", "127.0.0.1", 8002)],
        False,
    ),
    (
        "0.0.0.0 wanted conflicts with a specific ip",
        [("TCP", "0.0.0.0", 8001)],
        [("TCP", "127.0.0.1", 8001)],
        False,
    ),
    (
        "specific ip wanted conflicts with 0.0.0.0",
        [("TCP", "127.0.0.1", 8001)],
        [("TCP", "0.0.0.0", 8001)],
        False,
    ),
    ("empty ip means 0.0.0.0", [("TCP", "", 8001)], [("TCP", "10.0.0.1", 8001)], False),
    ("0.0.0.0 on another protocol", [("UDP", "0.0.0.0", 8001)], [("TCP", "0.0.0.0", 8001)], True),
]


@pytest.mark.parametrize(("name", "wanted", "used", "fits"), CASES)
def test_filter(
    name: str, wanted: list[tuple[str, str, int]], used: list[tuple[str, str, int]], fits: bool
) -> None:
    from kopf_scheduler_workbench.testing.builders import make_node

    existing = [port_pod(*used, name="e", node_name="n1")] if used else []
    snapshot = make_snapshot([make_node("n1")], existing)
    pod = port_pod(*wanted)
    pl = NodePorts()
    state = CycleState()
    assert pl.pre_filter(state, pod, snapshot.list()) == (None, None)
    status = pl.filter(state, pod, snapshot.list()[0])
    if fits:
        assert status is None
    else:
        assert status is not None
        assert status.code == Code.UNSCHEDULABLE
        assert status.reasons == [REASON]


def test_skip_without_host_ports() -> None:
    _, status = NodePorts().pre_filter(CycleState(), make_pod("p"), [])
    assert status is not None and status.code == Code.SKIP


def test_hint_after_pod_deleted() -> None:
    pl = NodePorts()
    pod = port_pod(("TCP", "", 8080))
    assert (
        pl.is_schedulable_after_pod_deleted(pod, port_pod(("TCP", "", 8080), name="u"), None)
        == QueueingHint.QUEUE_SKIP
    )
    bound_same = port_pod(("TCP", "", 8080), name="b", node_name="n1")
    assert pl.is_schedulable_after_pod_deleted(pod, bound_same, None) == QueueingHint.QUEUE
    bound_other = port_pod(("TCP", "", 9090), name="b", node_name="n1")
    assert pl.is_schedulable_after_pod_deleted(pod, bound_other, None) == QueueingHint.QUEUE_SKIP
    no_ports = make_pod("b", node_name="n1")
    assert pl.is_schedulable_after_pod_deleted(pod, no_ports, None) == QueueingHint.QUEUE_SKIP


def test_events_are_assigned_pod_delete_and_node_add() -> None:
    events = {(e.event.resource, e.event.action) for e in NodePorts().events_to_register()}
    assert events == {(EventResource.ASSIGNED_POD, ActionType.DELETE), (EventResource.NODE, ActionType.ADD)}
