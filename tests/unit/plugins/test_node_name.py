"""NodeName: spec.nodeName pins the pod to one node."""

from __future__ import annotations

from node_plugin_helpers import assert_filter_vector_agrees, make_snapshot

from kopf_scheduler.framework.interface import Code, CycleState, QueueingHint
from kopf_scheduler.plugins.node_name import NodeName
from kopf_scheduler.testing.builders import make_node, make_pod


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


def test_hint() -> None:
    pl = NodeName()
    assert pl.is_schedulable_after_node_add(make_pod("p"), None, make_node("x")) == QueueingHint.QUEUE
    pinned = make_pod("p", node_name="foo")
    assert pl.is_schedulable_after_node_add(pinned, None, make_node("foo")) == QueueingHint.QUEUE
    assert pl.is_schedulable_after_node_add(pinned, None, make_node("bar")) == QueueingHint.QUEUE_SKIP
