"""PreQueueingHints (issue 30): a ResourceClaim event asks DynamicResources' QueueingHint only for
the waiting pods that name the claim, and moves the same pods as asking every one.

Through the whole engine (default profile, the real DynamicResources, the real queue): pods wait in
the pool at DynamicResources' PreEnqueue for their claims; claim events come through the event
handlers. "Without narrowing" is the same engine with the queue's PreQueueingHints unset: every
pool pod asked with every hint, as before (and as the reference with SchedulerPreQueueingHints off).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from kopf_scheduler.api.objects import Pod, parse_pod
from kopf_scheduler.api.resource import AllocationResult, ResourceClaim, parse_resource_claim
from kopf_scheduler.config import features
from kopf_scheduler.engine import Engine, new_engine
from kopf_scheduler.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from kopf_scheduler.framework.interface import Plugin, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import default_registry
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler.metrics.recorder import NoopMetrics
from kopf_scheduler.plugins.dynamic_resources import DynamicResources

SCHEDULER = "claims"


def claim_pod(name: str, claim: str | None = None, template: bool = False, labels: Any = None) -> Pod:
    entries = []
    if claim is not None:
        entries.append({"name": "gpu", "resourceClaimName": claim})
    if template:
        entries.append({"name": "tpl", "resourceClaimTemplateName": "gpu-template"})
    return parse_pod(
        {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels or {}},
            "spec": {"schedulerName": SCHEDULER, "containers": [{"name": "c"}], "resourceClaims": entries},
        }
    )


def with_status(pod: Pod, claim: str) -> Pod:
    raw = {
        "metadata": {"name": pod.name, "namespace": "default", "uid": pod.uid, "resourceVersion": "2"},
        "spec": {
            "schedulerName": SCHEDULER,
            "containers": [{"name": "c"}],
            "resourceClaims": [{"name": "tpl", "resourceClaimTemplateName": "gpu-template"}],
        },
        "status": {"resourceClaimStatuses": [{"name": "tpl", "resourceClaimName": claim}]},
    }
    return parse_pod(raw)


def claim(name: str, owner: Pod | None = None) -> ResourceClaim:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-claim-{name}"}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner.name, "uid": owner.uid, "controller": True}
        ]
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}
    return parse_resource_claim({"metadata": meta, "spec": spec})


class ClaimWatcher(Plugin):
    """Another plugin registered for claim events, without a PreQueueingHint: it holds pods
    labelled ``watch`` at PreEnqueue until a claim named ``release`` exists."""

    name = "ClaimWatcher"
    released = False

    def pre_enqueue(self, pod: Pod) -> Status | None:
        if pod.labels.get("watch") and not ClaimWatcher.released:
            return Status.unresolvable("waiting for the release claim")
        return None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        event = ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.ADD)
        return [ClusterEventWithHint(event, self._after_claim)]

    def _after_claim(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        ClaimWatcher.released = new is not None and new.metadata.name == "release"
        return QueueingHint.QUEUE if ClaimWatcher.released else QueueingHint.QUEUE_SKIP


class Counted(NoopMetrics):
    def __init__(self) -> None:
        self.pre_hints: list[tuple[str, str]] = []

    def pre_queueing_hint(self, plugin: str, result: str) -> None:
        self.pre_hints.append((plugin, result))


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The pods DynamicResources' claim hint is asked about, in order (the real hint, recorded)."""
    calls: list[str] = []
    real = DynamicResources.is_schedulable_after_claim_change

    def recording(self: DynamicResources, pod: Pod, old: Any, new: Any) -> QueueingHint:
        calls.append(pod.name)
        return real(self, pod, old, new)

    monkeypatch.setattr(DynamicResources, "is_schedulable_after_claim_change", recording)
    ClaimWatcher.released = False
    yield calls


def engine(narrowed: bool, gate: bool = False, watcher: bool = False, metrics: Any = None) -> Engine:
    registry = default_registry()
    spec: dict[str, Any] = {"schedulerName": SCHEDULER}
    if watcher:
        registry.register("ClaimWatcher", ClaimWatcher)
        spec["plugins"] = {"multiPoint": {"enabled": [{"name": "ClaimWatcher"}]}}
    with features.using(features.FeatureGates({"SchedulerPreQueueingHints": gate})):
        profiles = [load_profile(spec, registry)]
        client = MemoryClusterClient()
        eng = new_engine(client, profiles, registry=registry, metrics=metrics, with_default=False)
    if not narrowed:
        eng.queue.set_pre_queueing_hints(None)
    return eng


def places(eng: Engine, pods: list[Pod]) -> dict[str, str | None]:
    return {p.name: eng.queue.where(p.uid) for p in pods}


def scenario(eng: Engine) -> tuple[list[dict[str, str | None]], list[Pod]]:
    """A waits for claim-a, B for claim-b, C for its template's claim; each event's outcome."""
    a, b, c = claim_pod("a", "claim-a"), claim_pod("b", "claim-b"), claim_pod("c", template=True)
    pods = [a, b, c]
    h = eng.handlers
    for pod in pods:
        h.add_pod(pod)
    seen = [places(eng, pods)]
    h.add_object("ResourceClaim", claim("claim-b"))  # B's claim: moves B, not A
    seen.append(places(eng, pods))
    c2 = with_status(c, "c-tpl")
    h.update_pod(c, c2)  # C's claim is named now (the index follows the update), not made yet
    seen.append(places(eng, pods))
    h.add_object("ResourceClaim", claim("c-tpl", owner=c2))  # C's: moves C
    seen.append(places(eng, pods))
    h.add_object("ResourceClaim", claim("unrelated"))  # nobody's
    seen.append(places(eng, pods))
    h.add_object("ResourceClaim", claim("claim-a"))  # A's
    seen.append(places(eng, pods))
    return seen, pods


def test_a_claim_event_asks_only_the_pods_naming_the_claim(asked: list[str]) -> None:
    seen, _ = scenario(engine(narrowed=True))
    # claim-b: only B asked; c-tpl: only C; unrelated: nobody; claim-a: only A.
    assert asked == ["b", "c", "a"]
    assert seen[0] == {"a": "unschedulable", "b": "unschedulable", "c": "unschedulable"}
    assert seen[1] == {"a": "unschedulable", "b": "active", "c": "unschedulable"}
    assert seen[3] == {"a": "unschedulable", "b": "active", "c": "active"}
    assert seen[5] == {"a": "active", "b": "active", "c": "active"}


def test_the_pods_moved_are_those_of_asking_every_pod(asked: list[str]) -> None:
    narrowed, _ = scenario(engine(narrowed=True))
    asked_narrowed = len(asked)
    asked.clear()
    everyone, _ = scenario(engine(narrowed=False))
    assert narrowed == everyone
    assert len(asked) > asked_narrowed  # without narrowing every waiting pod was asked


def test_a_pod_held_by_another_plugin_still_moves_with_the_gate_off(asked: list[str]) -> None:
    """ClaimWatcher registered claim events without a PreQueueingHint: every waiting pod is looked
    at (as before), and its hint moves D though DynamicResources named nobody; DynamicResources'
    hint is still asked only for the pods naming the claim."""
    eng = engine(narrowed=True, watcher=True)
    a, d = claim_pod("a", "claim-a"), claim_pod("d", labels={"watch": "yes"})
    eng.handlers.add_pod(a)
    eng.handlers.add_pod(d)
    assert places(eng, [a, d]) == {"a": "unschedulable", "d": "unschedulable"}
    eng.handlers.add_object("ResourceClaim", claim("release"))
    assert places(eng, [a, d]) == {"a": "unschedulable", "d": "active"}
    assert asked == []  # a names claim-a, not release


def test_with_the_gate_on_only_the_named_pods_are_asked_as_the_reference(asked: list[str]) -> None:
    """SchedulerPreQueueingHints=true: the reference's collectEntitiesToEvaluate asks only the pods
    some PreQueueingHint named; a pod only another plugin holds is not asked by that event."""
    metrics = Counted()
    eng = engine(narrowed=True, gate=True, watcher=True, metrics=metrics)
    a, d = claim_pod("a", "claim-a"), claim_pod("d", labels={"watch": "yes"})
    eng.handlers.add_pod(a)
    eng.handlers.add_pod(d)
    eng.handlers.add_object("ResourceClaim", claim("release"))
    assert places(eng, [a, d]) == {"a": "unschedulable", "d": "unschedulable"}
    eng.handlers.add_object("ResourceClaim", claim("claim-a"))
    assert places(eng, [a, d]) == {"a": "active", "d": "unschedulable"}
    assert asked == ["a"]
    assert metrics.pre_hints == [("DynamicResources", "narrowed")] * 2


def test_the_metric_counts_only_with_the_gate_on(asked: list[str]) -> None:
    allocated = dataclasses.replace(
        claim("x"), status=dataclasses.replace(claim("x").status, allocation=AllocationResult())
    )
    for gate, expected in (
        (False, []),
        (True, [("DynamicResources", "narrowed"), ("DynamicResources", "all_pods")]),
    ):
        metrics = Counted()
        eng = engine(narrowed=True, gate=gate, metrics=metrics)
        eng.handlers.add_pod(claim_pod("a", "claim-a"))
        eng.handlers.add_object("ResourceClaim", allocated)
        # Deallocated: frees devices for every pod, so every pod is asked (all_pods).
        eng.handlers.update_object("ResourceClaim", allocated, claim("x"))
        assert metrics.pre_hints == expected, gate
    assert asked == ["a", "a"]  # the deallocation asked A under either gate


def test_the_index_follows_pods_leaving_the_pool(asked: list[str]) -> None:
    """The index holds the pool's pods only: a pod deleted or moved out leaves it (it would grow
    with every pod ever queued otherwise)."""
    eng = engine(narrowed=True)
    a, b = claim_pod("a", "claim-a"), claim_pod("b", "claim-b")
    eng.handlers.add_pod(a)
    eng.handlers.add_pod(b)
    index = eng.queue._pool_index
    dra = "DynamicResources"
    assert set(index) == {(dra, ("default", "claim-a")), (dra, ("default", "claim-b"))}
    eng.handlers.delete_pod(a)
    eng.handlers.add_object("ResourceClaim", claim("claim-b"))  # moves B to activeQ
    assert eng.queue.where(b.uid) == "active"
    assert index == {}
    eng.handlers.add_object("ResourceClaim", claim("claim-a"))
    assert asked == ["b"]
