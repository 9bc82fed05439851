"""PriorityQueue: ordering, backoff, the unschedulable pool, hints, gating and in-flight events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kopf_scheduler.api.objects import Pod, parse_pod
from kopf_scheduler.framework.events import (
    EVENT_NODE_ADD,
    EVENT_UNSCHEDULED_POD_ADD,
    UPDATE_POD_OTHER,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
    pod_scheduling_properties_change,
)
from kopf_scheduler.framework.interface import Status
from kopf_scheduler.queue import PriorityQueue, QueuedPodInfo
from kopf_scheduler_workbench.testing.builders import make_pod, pod_dict
from kopf_scheduler_workbench.testing.clock import FakeClock

NODE_LABEL = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_LABEL, "NodeLabel")
NODE_TAINT = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT, "NodeTaint")
NODE_ALLOC = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_ALLOCATABLE, "NodeAlloc")


def _always(hint: QueueingHint) -> Any:
    def fn(pod: Pod, old: Any, new: Any) -> QueueingHint:
        return hint

    return fn


HINTS = {
    "NodeResourcesFit": [
        ClusterEventWithHint(
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE)
        ),
        ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.DELETE)),
    ],
    "NodeAffinity": [
        ClusterEventWithHint(
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
            _always(QueueingHint.QUEUE_SKIP),
        )
    ],
    "TaintToleration": [ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT))],
    "Quiet": [],
    "VolumeBinding": [ClusterEventWithHint(ClusterEvent(EventResource.PVC, ActionType.ADD))],
}


class Gates:
    """A SchedulingGates stand-in: gated while the pod has scheduling gates."""

    name = "SchedulingGates"

    def pre_enqueue(self, pod: Pod) -> Status | None:
        if pod.scheduling_gates:
            return Status.unresolvable("waiting for scheduling gates")
        return None


GATES_HINTS = {
    "SchedulingGates": [
        ClusterEventWithHint(
            ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED),
            lambda pod, old, new: (
                QueueingHint.QUEUE
                if new is not None and new.uid == pod.uid and not new.scheduling_gates
                else QueueingHint.QUEUE_SKIP
            ),
        )
    ],
}


def make_queue(clock: FakeClock | None = None, **kwargs: Any) -> PriorityQueue:
    kwargs.setdefault("hints", HINTS)
    return PriorityQueue(clock=clock or FakeClock(), **kwargs)


def reject(q: PriorityQueue, qpi: QueuedPodInfo, *plugins: str, pending: tuple[str, ...] = ()) -> None:
    qpi.unschedulable_plugins.update(plugins)
    qpi.pending_plugins.update(pending)
    q.add_unschedulable_if_not_present(qpi, q.scheduling_cycle)


def pop(q: PriorityQueue) -> QueuedPodInfo:
    qpi = q.pop_nowait()
    assert qpi is not None
    return qpi


# --- ordering -----------------------------------------------------------------------------------


def test_pop_orders_by_priority_then_timestamp() -> None:
    clock = FakeClock()
    q = make_queue(clock)
    specs = [("low-old", 0), ("high-new", 100), ("mid", 10), ("low-new", 0), ("high-newer", 100)]
    for name, prio in specs:
        q.add(make_pod(name, priority=prio))
        clock.advance(1)
    order = [pop(q).pod.name for _ in specs]
    assert order == ["high-new", "high-newer", "mid", "low-old", "low-new"]
    assert q.pop_nowait() is None
    assert q.scheduling_cycle == 5


def test_custom_less_is_used() -> None:
    q = make_queue(less=lambda a, b: a.pod.name < b.pod.name)
    for name in ("c", "a", "b"):
        q.add(make_pod(name, priority=len(name)))
    assert [pop(q).pod.name for _ in range(3)] == ["a", "b", "c"]


def test_update_priority_reorders_active_queue() -> None:
    q = make_queue()
    a, b = make_pod("a", priority=1), make_pod("b", priority=2)
    q.add(a)
    q.add(b)
    a2 = parse_pod({**pod_dict("a", uid=a.uid, priority=5)})
    q.update(a, a2)
    first = pop(q)
    assert first.pod is a2


# --- backoff ------------------------------------------------------------------------------------


def test_backoff_doubles_from_one_second_up_to_ten() -> None:
    clock = FakeClock()
    q = make_queue(clock)
    pod = make_pod("p")
    q.add(pod)
    observed = []
    for _ in range(6):
        qpi = pop(q)
        reject(q, qpi)  # no rejecting plugin (an error): always goes through backoff
        assert q.where(pod.uid) == "backoff"
        waited = 0.0
        while q.where(pod.uid) == "backoff":
            clock.advance(0.25)
            waited += 0.25
            q.flush_backoff_completed()
        observed.append(waited)
        assert q.where(pod.uid) == "active"
    assert observed == [1, 2, 4, 8, 10, 10]


@pytest.mark.parametrize(
    ("initial", "maximum", "attempts", "expected"),
    [(1.0, 10.0, 0, 0.0), (1.0, 10.0, 1, 1.0), (1.0, 10.0, 4, 8.0), (1.0, 10.0, 5, 10.0), (2.0, 5.0, 3, 5.0)],
)
def test_backoff_duration_table(initial: float, maximum: float, attempts: int, expected: float) -> None:
    q = make_queue(initial_backoff=initial, max_backoff=maximum)
    qpi = QueuedPodInfo(make_pod("p"), attempts=attempts)
    assert q.backoff_duration(qpi) == expected


def test_backoff_queue_orders_by_expiry() -> None:
    clock = FakeClock()
    q = make_queue(clock)
    a, b = make_pod("a"), make_pod("b")
    q.add(a)
    q.add(b)
    qa, qb = pop(q), pop(q)
    qa.attempts = 3  # 4 s backoff
    reject(q, qa)
    reject(q, qb)  # 1 s backoff
    clock.advance(1)
    q.flush_backoff_completed()
    assert q.where(b.uid) == "active" and q.where(a.uid) == "backoff"
    clock.advance(3)
    q.flush_backoff_completed()
    assert q.where(a.uid) == "active"


# --- the unschedulable pool, events and hints ---------------------------------------------------


@pytest.mark.parametrize(
    ("plugins", "event", "advance", "expected"),
    [
        # Rejected by NodeResourcesFit: a node add moves it; backoff decides where.
        (("NodeResourcesFit",), EVENT_NODE_ADD, 0.0, "backoff"),
        (("NodeResourcesFit",), EVENT_NODE_ADD, 5.0, "active"),
        (("NodeResourcesFit",), NODE_ALLOC, 5.0, "active"),
        # An event NodeResourcesFit did not register leaves it in the pool.
        (("NodeResourcesFit",), NODE_LABEL, 5.0, "unschedulable"),
        (("NodeResourcesFit",), NODE_TAINT, 5.0, "unschedulable"),
        # NodeAffinity registered NodeAdd but its hint says QueueSkip.
        (("NodeAffinity",), EVENT_NODE_ADD, 5.0, "unschedulable"),
        # Any rejecting plugin whose hint says Queue is enough.
        (("NodeAffinity", "NodeResourcesFit"), EVENT_NODE_ADD, 5.0, "active"),
        (("NodeAffinity", "TaintToleration"), NODE_TAINT, 5.0, "active"),
        # A plugin that registered nothing is only retried by the flush.
        (("Quiet",), EVENT_NODE_ADD, 5.0, "unschedulable"),
        # A plugin missing from the map is interested in everything.
        (("Unregistered",), NODE_LABEL, 5.0, "active"),
        # Assigned pod deletion matches a Pod/Delete registration.
        (
            ("NodeResourcesFit",),
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE, "AssignedPodDelete"),
            5.0,
            "active",
        ),
    ],
)
def test_move_on_cluster_event(
    plugins: tuple[str, ...], event: ClusterEvent, advance: float, expected: str
) -> None:
    clock = FakeClock()
    q = make_queue(clock)
    pod = make_pod("p")
    q.add(pod)
    reject(q, pop(q), *plugins)
    assert q.where(pod.uid) == "unschedulable"
    clock.advance(advance)
    q.move_all_to_active_or_backoff(event, None, None)
    assert q.where(pod.uid) == expected


def test_pending_plugin_queue_skips_backoff() -> None:
    q = make_queue()
    pod = make_pod("p")
    q.add(pod)
    reject(q, pop(q), "NodeAffinity", pending=("VolumeBinding",))
    q.move_all_to_active_or_backoff(ClusterEvent(EventResource.PVC, ActionType.ADD, "PvcAdd"))
    assert q.where(pod.uid) == "active"  # backoff not over, yet straight to activeQ


def test_hint_receives_objects_and_errors_mean_queue() -> None:
    seen: list[tuple[str, Any, Any]] = []

    def hint(pod: Pod, old: Any, new: Any) -> QueueingHint:
        seen.append((pod.name, old, new))
        raise RuntimeError("boom")

    hints = {"P": [ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD), hint)]}
    clock = FakeClock()
    q = make_queue(clock, hints=hints)
    pod = make_pod("p")
    q.add(pod)
    reject(q, pop(q), "P")
    clock.advance(2)
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, "new-node")
    assert seen == [("p", None, "new-node")]
    assert q.where(pod.uid) == "active"


def test_pre_check_filters_pods() -> None:
    clock = FakeClock()
    q = make_queue(clock)
    a, b = make_pod("a", priority=1), make_pod("b", priority=9)
    for pod in (a, b):
        q.add(pod)
    for _ in range(2):
        reject(q, pop(q), "NodeResourcesFit")
    clock.advance(2)
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, pre_check=lambda p: p.priority <= 1)
    assert q.where(a.uid) == "active"
    assert q.where(b.uid) == "unschedulable"


def test_flush_unschedulable_leftover_after_five_minutes() -> None:
    clock = FakeClock()
    q = make_queue(clock)
    pod = make_pod("p")
    q.add(pod)
    reject(q, pop(q), "Quiet")
    clock.advance(300)
    q.flush_unschedulable_left_over()
    assert q.where(pod.uid) == "unschedulable"  # not *more* than 5 minutes yet
    clock.advance(0.5)
    q.flush_unschedulable_left_over()
    assert q.where(pod.uid) == "active"


def test_flush_leftover_respects_configured_duration() -> None:
    clock = FakeClock()
    q = make_queue(clock, max_unschedulable_duration=60)
    pod = make_pod("p")
    q.add(pod)
    reject(q, pop(q), "Quiet")
    clock.advance(61)
    q.flush_unschedulable_left_over()
    assert q.where(pod.uid) == "active"


def test_assigned_pod_scale_down_moves_all() -> None:
    clock = FakeClock()
    q = make_queue(clock)
    pod = make_pod("p")
    q.add(pod)
    reject(q, pop(q), "Unregistered")
    clock.advance(2)
    old = make_pod("big", cpu="2", node_name="n1")
    new = parse_pod(pod_dict("big", uid=old.uid, cpu="1", node_name="n1"))
    for event in pod_scheduling_properties_change(old, new):
        q.move_all_to_active_or_backoff(event, old, new)
    assert q.where(pod.uid) == "active"


# --- the move-during-cycle rule -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "expected"),
    [(EVENT_NODE_ADD, "backoff"), (NODE_LABEL, "unschedulable")],
)
def test_event_during_cycle_is_not_lost(event: ClusterEvent, expected: str) -> None:
    q = make_queue()
    pod = make_pod("p")
    q.add(pod)
    qpi = pop(q)
    q.move_all_to_active_or_backoff(event, None, "node")  # arrives while the pod is in flight
    reject(q, qpi, "NodeResourcesFit")
    assert q.where(pod.uid) == expected
    assert q.in_flight_pods() == []


def test_event_before_cycle_does_not_count() -> None:
    q = make_queue()
    a, b = make_pod("a", priority=2), make_pod("b", priority=1)
    q.add(a)
    q.add(b)
    qa = pop(q)
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD)
    reject(q, qa, "NodeResourcesFit")
    qb = pop(q)  # popped after the event
    reject(q, qb, "NodeResourcesFit")
    assert q.where(a.uid) == "backoff"
    assert q.where(b.uid) == "unschedulable"


def test_events_are_trimmed_when_nothing_is_in_flight() -> None:
    q = make_queue()
    a, b = make_pod("a", priority=2), make_pod("b", priority=1)
    q.add(a)
    q.add(b)
    qa = pop(q)
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD)
    qb = pop(q)
    q.move_all_to_active_or_backoff(NODE_ALLOC)
    assert len(q._in_flight._events) == 2
    q.done(qa.uid)
    assert [e.event for e in q._in_flight._events] == [NODE_ALLOC]  # b only needs the later event
    q.done(qb.uid)
    assert not q._in_flight._events
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD)
    assert not q._in_flight._events  # nothing in flight: nothing recorded


def test_delete_while_in_flight_drops_the_pod() -> None:
    q = make_queue()
    pod = make_pod("p")
    q.add(pod)
    qpi = pop(q)
    q.delete(pod)
    reject(q, qpi, "NodeResourcesFit")
    assert pod.uid not in q
    assert q.in_flight_pods() == []


def test_update_while_in_flight_requeues_latest_version_and_replays_event() -> None:
    hints = {"P": [ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_LABEL))]}
    q = make_queue(hints=hints)
    pod = make_pod("p", labels={"v": "1"})
    q.add(pod)
    qpi = pop(q)
    newer = parse_pod(pod_dict("p", uid=pod.uid, labels={"v": "2"}))
    q.update(pod, newer)
    assert pod.uid not in q  # still in flight
    reject(q, qpi, "P")
    got = q.get(pod.uid)
    assert got is not None and got.pod is newer
    assert q.where(pod.uid) == "backoff"


def test_activate_moves_pool_and_backoff_pods_and_marks_in_flight() -> None:
    q = make_queue()
    a, b, c = make_pod("a", priority=3), make_pod("b", priority=2), make_pod("c", priority=1)
    for pod in (a, b, c):
        q.add(pod)
    reject(q, pop(q), "Quiet")
    reject(q, pop(q))  # error -> backoff
    qc = pop(q)
    assert (q.where(a.uid), q.where(b.uid)) == ("unschedulable", "backoff")
    q.activate([a, b, c])
    assert (q.where(a.uid), q.where(b.uid)) == ("active", "active")
    reject(q, qc, "Quiet")
    assert q.where(c.uid) == "backoff"  # the activation while in flight was remembered


# --- gating -------------------------------------------------------------------------------------


def test_gated_pod_stays_out_of_active_queue_until_gates_removed() -> None:
    q = make_queue(pre_enqueue=lambda pod: [Gates()], hints=GATES_HINTS)
    gated = parse_pod(pod_dict("g", schedulingGates=[{"name": "example.com/wait"}]))
    q.add(gated)
    assert q.pending_pods() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 1}
    assert q.pop_nowait() is None
    info = q.get(gated.uid)
    assert info is not None and info.gated and info.gating_plugin == "SchedulingGates"

    # An unrelated update and an unrelated event keep it gated.
    relabelled = parse_pod(pod_dict("g", uid=gated.uid, labels={"x": "y"}, schedulingGates=[{"name": "w"}]))
    q.update(gated, relabelled)
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD)
    q.flush_unschedulable_left_over()
    assert q.pending_pods()["gated"] == 1

    ungated = parse_pod(pod_dict("g", uid=gated.uid, labels={"x": "y"}))
    q.update(relabelled, ungated)
    assert q.pending_pods() == {"active": 1, "backoff": 0, "unschedulable": 0, "gated": 0}
    popped = pop(q)
    assert popped.pod is ungated and not popped.gated


def test_gated_pod_rechecked_on_timeout_stays_gated() -> None:
    clock = FakeClock()
    q = make_queue(clock, pre_enqueue=lambda pod: [Gates()], hints=GATES_HINTS)
    gated = parse_pod(pod_dict("g", schedulingGates=[{"name": "w"}]))
    q.add(gated)
    clock.advance(301)
    q.flush_unschedulable_left_over()
    assert q.pending_pods()["gated"] == 1


def test_pre_enqueue_is_per_pod_profile() -> None:
    def plugins_for(pod: Pod) -> list[Gates]:
        return [Gates()] if pod.scheduler_name == "strict" else []

    q = make_queue(pre_enqueue=plugins_for)
    gates = [{"name": "w"}]
    q.add(parse_pod(pod_dict("a", scheduler_name="strict", schedulingGates=gates)))
    q.add(parse_pod(pod_dict("b", scheduler_name="lenient", schedulingGates=gates)))
    assert q.pending_pods() == {"active": 1, "backoff": 0, "unschedulable": 0, "gated": 1}


# --- update / delete ----------------------------------------------------------------------------


def test_update_of_pool_pod_requeues_only_when_hint_says_so() -> None:
    hints = {"P": [ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATIONS))]}
    clock = FakeClock()
    q = make_queue(clock, hints=hints)
    pod = make_pod("p")
    q.add(pod)
    reject(q, pop(q), "P")
    clock.advance(5)
    relabelled = parse_pod(pod_dict("p", uid=pod.uid, labels={"a": "b"}))
    q.update(pod, relabelled)
    assert q.where(pod.uid) == "unschedulable"
    tolerant = parse_pod(pod_dict("p", uid=pod.uid, labels={"a": "b"}, tolerations=[{"operator": "Exists"}]))
    q.update(relabelled, tolerant)
    assert q.where(pod.uid) == "active"


def test_update_of_unknown_pod_adds_it_and_delete_removes_everywhere() -> None:
    q = make_queue()
    pod = make_pod("p")
    q.update(pod, pod)
    assert q.where(pod.uid) == "active"
    q.delete(pod)
    assert pod.uid not in q
    q.add(pod)
    reject(q, pop(q), "Quiet")
    q.delete(pod)
    assert len(q) == 0 and q.pending_pods()["unschedulable"] == 0


def test_add_twice_does_not_duplicate() -> None:
    q = make_queue()
    pod = make_pod("p")
    q.add(pod)
    q.add(pod)
    assert q.pending_pods()["active"] == 1


def test_nominated_pods_tracked_on_add_and_delete() -> None:
    q = make_queue()
    raw = pod_dict("p")
    raw["status"]["nominatedNodeName"] = "n1"
    pod = parse_pod(raw)
    q.add(pod)
    assert q.nominated_pods_for_node("n1") == [pod]
    q.delete(pod)
    assert q.nominated_pods_for_node("n1") == []


# --- pod update events --------------------------------------------------------------------------


def test_pod_scheduling_properties_change() -> None:
    base = make_pod("p", cpu="2", labels={"a": "1"})

    def variant(**kw: Any) -> Pod:
        kw.setdefault("cpu", "2")
        kw.setdefault("labels", {"a": "1"})
        return parse_pod(pod_dict("p", uid=base.uid, **kw))

    def actions(new: Pod) -> list[ActionType]:
        return [e.action for e in pod_scheduling_properties_change(base, new)]

    assert actions(variant(labels={"a": "2"})) == [ActionType.UPDATE_POD_LABEL]
    assert actions(variant(cpu="1")) == [ActionType.UPDATE_POD_SCALE_DOWN]
    assert actions(variant(cpu="3")) == [UPDATE_POD_OTHER]
    assert actions(variant(tolerations=[{"operator": "Exists"}])) == [ActionType.UPDATE_POD_TOLERATIONS]
    gated = parse_pod(
        pod_dict("p", uid=base.uid, cpu="2", labels={"a": "1"}, schedulingGates=[{"name": "x"}])
    )
    assert [e.action for e in pod_scheduling_properties_change(gated, base)] == [
        ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED
    ]
    bound = variant(node_name="n1")
    assert pod_scheduling_properties_change(base, bound)[0].resource == EventResource.ASSIGNED_POD


# --- async pop ----------------------------------------------------------------------------------


async def test_async_pop_waits_for_a_pod_and_close_releases() -> None:
    q = make_queue()
    waiter = asyncio.ensure_future(q.pop())
    await asyncio.sleep(0)
    assert not waiter.done()
    pod = make_pod("p")
    q.add(pod)
    got = await asyncio.wait_for(waiter, 1)
    assert got is not None and got.pod is pod

    waiter = asyncio.ensure_future(q.pop())
    await asyncio.sleep(0)
    q.close()
    assert await asyncio.wait_for(waiter, 1) is None


async def test_async_pop_woken_by_backoff_flush() -> None:
    clock = FakeClock()
    q = make_queue(clock, pop_from_backoff=False)  # the pre-1.33 behaviour, still selectable
    pod = make_pod("p")
    q.add(pod)
    reject(q, pop(q))
    waiter = asyncio.ensure_future(q.pop())
    await asyncio.sleep(0)
    assert not waiter.done()
    clock.advance(1)
    q.flush_backoff_completed()
    got = await asyncio.wait_for(waiter, 1)
    assert got is not None and got.attempts == 2


def test_pop_from_backoff_when_active_empty_by_default() -> None:
    q = make_queue()  # SchedulerPopFromBackoffQ is on by default since 1.33
    pod = make_pod("p")
    q.add(pod)
    reject(q, pop(q), "NodeResourcesFit")
    q.move_all_to_active_or_backoff(NODE_ALLOC)
    assert q.where(pod.uid) == "backoff"
    assert pop(q).pod is pod


def test_errored_pods_are_not_popped_from_backoff() -> None:
    clock = FakeClock()
    q = make_queue(clock)
    pod = make_pod("p")
    q.add(pod)
    reject(q, pop(q))  # no rejecting plugin: an error, kept in error backoff
    assert q.where(pod.uid) == "backoff"
    assert q.pop_nowait() is None
    clock.advance(1)
    q.flush_backoff_completed()
    assert pop(q).pod is pod


async def test_idle_pop_takes_a_pod_moved_to_backoff() -> None:
    q = make_queue()
    pod = make_pod("p")
    q.add(pod)
    reject(q, pop(q), "NodeResourcesFit")
    waiter = asyncio.ensure_future(q.pop())
    await asyncio.sleep(0)
    assert not waiter.done()
    q.move_all_to_active_or_backoff(NODE_ALLOC)  # still backing off: goes to backoffQ
    got = await asyncio.wait_for(waiter, 1)
    assert got is not None and got.pod is pod


def test_large_queue_pops_in_priority_order() -> None:
    # Speed is measured by the benchmarks, never by a wall-clock assertion in a test.
    q = make_queue()
    pods = [make_pod(f"p{i}", priority=i % 7) for i in range(5000)]
    for pod in pods:
        q.add(pod)
    popped = [pop(q) for _ in pods]
    prios = [p.pod.priority for p in popped]
    assert prios == sorted(prios, reverse=True)


@pytest.mark.parametrize(("with_union", "expected_calls"), [(True, 0), (False, 1)])
def test_callable_hints_with_union_skip_uninteresting_events(with_union: bool, expected_calls: int) -> None:
    profile_a = {"NodeResourcesFit": HINTS["NodeResourcesFit"]}
    profile_b = {"NodeAffinity": HINTS["NodeAffinity"]}
    calls: list[str] = []

    def hints_for(pod: Pod) -> Any:
        calls.append(pod.name)
        return profile_a if pod.scheduler_name == "a" else profile_b

    q = make_queue()
    q.set_hints(hints_for, [profile_a, profile_b] if with_union else None)
    pod = make_pod("p", scheduler_name="a")
    q.add(pod)
    reject(q, pop(q), "NodeResourcesFit")
    q.move_all_to_active_or_backoff(NODE_TAINT)  # nobody registered taint updates
    assert len(calls) == expected_calls
    assert q.where(pod.uid) == "unschedulable"
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD)
    assert q.where(pod.uid) == "backoff"


def test_events_with_nothing_to_move_skip_the_registration_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """During the initial listing the queue is empty: events must not consult the registrations."""
    q = make_queue()
    calls: list[ClusterEvent] = []
    original = q.is_event_of_interest

    def counting(event: ClusterEvent) -> bool:
        calls.append(event)
        return original(event)

    monkeypatch.setattr(q, "is_event_of_interest", counting)
    q.move_all_to_active_or_backoff(NODE_ALLOC)
    assert calls == []

    # A rejected pod in the pool makes the same event count again, and it moves the pod.
    pod = make_pod("p")
    q.add(pod)
    reject(q, pop(q), "NodeResourcesFit")
    q.move_all_to_active_or_backoff(NODE_ALLOC)
    assert calls and set(calls) == {NODE_ALLOC}
    assert q.pending_pods()["unschedulable"] == 0


class Quorum:
    """A gang stand-in: a pod of group G waits until ``need`` pods of G have arrived; its answer
    depends on the group alone, which it declares (``pre_enqueue_shared_by``) when ``shares``."""

    name = "Quorum"

    def __init__(self, need: int) -> None:
        self.need = need
        self.arrived: dict[str, int] = {}
        self.asked = 0

    def pre_enqueue(self, pod: Pod) -> Status | None:
        self.asked += 1
        if self.arrived.get(pod.labels["group"], 0) < self.need:
            return Status.unresolvable("waiting for members")
        return None


class SharedQuorum(Quorum):
    def pre_enqueue_shared_by(self, pod: Pod) -> str | None:
        return pod.labels["group"]


QUORUM_HINTS = {
    "Quorum": [
        ClusterEventWithHint(
            EVENT_UNSCHEDULED_POD_ADD,
            lambda pod, old, new: (
                QueueingHint.QUEUE if new.labels["group"] == pod.labels["group"] else QueueingHint.QUEUE_SKIP
            ),
        )
    ],
}


@pytest.mark.parametrize(
    ("plugin_class", "asked"),
    [
        (SharedQuorum, 50 + 49 + 50),  # each arrival, one waiting member an event, all at the quorum
        (Quorum, 50 + sum(range(1, 51))),  # each arrival, then every waiting member at every event
    ],
)
def test_a_shared_pre_enqueue_answer_is_asked_once_a_group_per_event(
    plugin_class: type[Quorum], asked: int
) -> None:
    """Members of two groups arrive one by one, each arrival an UnscheduledPodAdd event: with the
    answer declared shared, the waiting members of a group are asked once an event (O(members)),
    not each of them (O(members^2)); the outcome is the same, every member active at the quorum."""
    plugin = plugin_class(need=50)
    q = make_queue(pre_enqueue=lambda pod: [plugin], hints=QUORUM_HINTS)
    other = parse_pod(pod_dict("other-0", labels={"group": "other"}))
    plugin.arrived["other"] = 1
    q.add(other)
    for i in range(50):
        member = parse_pod(pod_dict(f"g-{i}", labels={"group": "g"}))
        plugin.arrived["g"] = i + 1
        q.add(member)
        q.move_all_to_active_or_backoff(EVENT_UNSCHEDULED_POD_ADD, None, member)
        active, gated = (50, 1) if i == 49 else (0, i + 2)
        assert q.pending_pods() == {"active": active, "backoff": 0, "unschedulable": 0, "gated": gated}
    assert plugin.asked == asked
    info = q.get(other.uid)
    assert info is not None and info.gated  # the other group's member was never moved
