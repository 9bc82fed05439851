"""NodeUnschedulable: cordoned nodes, the unschedulable toleration, hints, vector agreement."""

from __future__ import annotations

from typing import Any

import pytest
from node_plugin_helpers import assert_filter_vector_agrees, make_snapshot

from kopf_scheduler.framework.interface import Code, CycleState, QueueingHint
from kopf_scheduler.plugins.node_unschedulable import NodeUnschedulable
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

TOLERATE = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    ("unschedulable", "tolerations", "fails"),
    [
        (False, [], False),
        (True, [], True),
        (True, TOLERATE, False),
        (True, [{"operator": "Exists"}], False),  # tolerates everything
        (
            True,
            [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}],
            True,
        ),
    ],
)
def test_filter(unschedulable: bool, tolerations: list[dict[str, Any]], fails: bool) -> None:
    snapshot = make_snapshot([make_node("n1", unschedulable=unschedulable), make_node("n2")])
    pod = make_pod("p", tolerations=tolerations)
    pl = NodeUnschedulable()
    status = pl.filter(CycleState(), pod, snapshot.list()[0])
    if fails:
        assert status is not None
        assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.reasons == ["node(s) were unschedulable"]
    else:
        assert status is None
    assert_filter_vector_agrees(pl, CycleState(), pod, snapshot)


def test_hints() -> None:
    pl = NodeUnschedulable()
    pod = make_pod("p")
    cordoned, ready = make_node("n1", unschedulable=True), make_node("n1")
    assert pl.is_schedulable_after_node_change(pod, None, ready) == QueueingHint.QUEUE
    assert pl.is_schedulable_after_node_change(pod, None, cordoned) == QueueingHint.QUEUE_SKIP
    assert pl.is_schedulable_after_node_change(pod, cordoned, ready) == QueueingHint.QUEUE
    assert pl.is_schedulable_after_node_change(pod, ready, ready) == QueueingHint.QUEUE_SKIP
    tolerant = make_pod("p", uid=pod.uid, tolerations=TOLERATE)
    assert pl.is_schedulable_after_pod_toleration_change(pod, pod, tolerant) == QueueingHint.QUEUE
    other = make_pod("q", tolerations=TOLERATE)
    assert pl.is_schedulable_after_pod_toleration_change(pod, other, other) == QueueingHint.QUEUE_SKIP
    assert pl.is_schedulable_after_pod_toleration_change(pod, pod, pod) == QueueingHint.QUEUE_SKIP
