"""NodeName: spec.nodeName pins the pod to one node."""

from __future__ import annotations

from node_plugin_helpers import assert_filter_vector_agrees, make_snapshot

from kopf_scheduler.framework.interface import ActionType, Code, CycleState, EventResource
from kopf_scheduler.plugins.node_name import NodeName
from kopf_scheduler_workbench.testing.builders import make_node, make_pod


def test_filter() -> None:
    snapshot = make_snapshot([make_node("foo"), make_node("bar")])
    pl = NodeName()
    free = make_pod("p")
    pinned = make_pod("p", node_name="foo")
    nowhere = make_pod("p", node_name="baz")
    foo, bar = snapshot.list()
    assert pl.filter(CycleState(), free, foo) is None
    assert pl.filter(CycleState(), pinned, foo) is None
    status = pl.filter(CycleState(), pinned, bar)
    assert status is not None
    assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.reasons == ["node(s) didn't match the requested node name"]
    for pod in (free, pinned, nowhere):
        assert_filter_vector_agrees(pl, CycleState(), pod, snapshot)


def test_pre_filter_narrows_to_the_named_node() -> None:
    """1.37: PreFilter returns the named node, so only it is evaluated."""
    pl = NodeName()
    result, status = pl.pre_filter(CycleState(), make_pod("p", node_name="foo"), [])
    assert status is None and result is not None and result.node_names == {"foo"}
    assert pl.pre_filter(CycleState(), make_pod("p"), []) == (None, None)


def test_node_add_event_has_no_hint() -> None:
    events = list(NodeName().events_to_register())
    assert [(e.event.resource, e.event.action, e.hint) for e in events] == [
        (EventResource.NODE, ActionType.ADD, None)
    ]
