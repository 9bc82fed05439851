"""Memory stays bounded under churn: per-pod state is dropped when pods go away (issue 8).

Each test churns uniquely named pods through create -> bind -> delete and asserts that the
containers that hold per-pod state return to their baseline size: structural checks, not RSS.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import random
from typing import Any

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.cluster.client import EVENT_SERIES_WINDOW, KubeClusterClient
from kopf_scheduler.engine import new_engine
from kopf_scheduler.eventhandlers import EventHandlers
from kopf_scheduler.plugins.inter_pod_affinity import InterPodAffinity
from kopf_scheduler.scheduler.schedule_one import Scheduler
from kopf_scheduler_workbench.testing.builders import make_node, make_pod
from kopf_scheduler_workbench.testing.fake_client import FakeClusterClient

_ANTI = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 10,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app": "churn"}},
                },
            }
        ]
    }
}


_REQUIRED_ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "other"}}}
        ]
    }
}
_SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "churn"}},
    }
]


def test_inter_pod_affinity_term_cache_forgets_freed_pods() -> None:
    plugin = InterPodAffinity()
    keep = make_pod("keep", affinity=_ANTI)
    first = plugin.terms_of(keep)
    baseline = len(plugin._terms)
    for i in range(200):
        plugin.terms_of(make_pod(f"p-{i}", affinity=_ANTI, labels={"app": "churn"}))
        plugin.terms_of(make_pod(f"plain-{i}"))  # no pod (anti-)affinity: nothing to cache
    gc.collect()
    assert len(plugin._terms) == baseline == 1
    assert plugin.terms_of(keep) is first  # a live pod still hits


class _Api:
    """Answers every request; the client's own bookkeeping is what is under test."""

    async def request(self, method: str, path: str, **_: Any) -> Any:
        return {}


async def test_event_series_expire_after_the_window() -> None:
    now = [0.0]
    client = KubeClusterClient(_Api(), instance="t", clock=lambda: now[0])  # type: ignore[arg-type]
    for i in range(100):
        await client.record_scheduled(make_pod(f"p-{i}"), "n1")
        now[0] += 1.0
    assert len(client._series) == 100  # all within the window: each could still become a series
    now[0] += EVENT_SERIES_WINDOW
    await client.record_scheduled(make_pod("last"), "n1")
    assert len(client._series) == 1


# --- the engine under churn -----------------------------------------------------------------------


def _engine() -> tuple[Scheduler, EventHandlers, FakeClusterClient]:
    client = FakeClusterClient()
    engine = new_engine(client, rng=random.Random(1))
    scheduler, handlers = engine.scheduler, engine.handlers
    for i in range(6):
        handlers.add_node(make_node(f"n{i}", cpu="4", memory="16Gi", pods="40"))
    return scheduler, handlers, client


def _per_pod_sizes(scheduler: Scheduler) -> dict[str, int]:
    """Every container the engine keys by pod (uid or object)."""
    queue: Any = scheduler.queue
    cache: Any = scheduler.cache
    sizes = {
        "cache.pods": cache.pod_count(),
        "cache.assumed": len(cache._assumed),
        "queue": len(queue),
        **{f"queue.{k}": v for k, v in queue._in_flight.sizes().items()},
        "nominator": len(queue.nominator),
        "scheduler.tasks": len(scheduler._tasks),
    }
    for name, fw in scheduler.profiles.frameworks.items():
        sizes[f"{name}.waiting_pods"] = len(fw.waiting_pods)
        ipa = fw.plugins.get("InterPodAffinity")
        if ipa is not None:
            sizes[f"{name}.InterPodAffinity.terms"] = len(ipa._terms)
        for plugin_name, plugin in fw.plugins.items():
            memo = getattr(plugin, "_memo", None)
            if memo is not None:  # per node and signature: bounded by the nodes, not the pods
                sizes[f"{name}.{plugin_name}.memo"] = len(memo)
        pre = fw.plugins.get("DefaultPreemption")
        if pre is not None:
            sizes[f"{name}.DefaultPreemption.preempting"] = len(pre._preempting)
    return sizes


async def _churn(scheduler: Scheduler, handlers: EventHandlers, client: FakeClusterClient, n: int) -> None:
    """Create, schedule, bind (as the watch would show it) and delete ``n`` uniquely named pods,
    keeping a few alive at a time; some are deleted while still pending."""
    live: dict[str, Pod] = {}
    pending: dict[str, Pod] = {}

    def on_bind(pod: Pod, node: str) -> None:
        bound = dataclasses.replace(pod, node_name=node)
        pending.pop(pod.uid, None)
        live[pod.uid] = bound
        handlers.update_pod(pod, bound)

    client.on_bind = on_bind
    seq = itertools.count()
    for _ in range(n):
        i = next(seq)
        kwargs: dict[str, Any] = {"cpu": "100m", "labels": {"app": "churn"}}
        if i % 2:
            kwargs["affinity"] = _ANTI
        if i % 5 == 0:
            kwargs["affinity"] = _REQUIRED_ANTI
        if i % 3 == 0:
            kwargs["topologySpreadConstraints"] = _SPREAD
        if i % 7 == 0:
            kwargs["cpu"] = "64"  # unschedulable: waits in the pool until deleted
        pod = make_pod(f"churn-{i}", **kwargs)
        pending[pod.uid] = pod
        handlers.add_pod(pod)
        await scheduler.schedule_one()
        await scheduler.wait_for_bindings()
        while len(live) > 20:
            handlers.delete_pod(live.pop(next(iter(live))))
        while len(pending) > 5:
            handlers.delete_pod(pending.pop(next(iter(pending))))
    for pod in [*live.values(), *pending.values()]:
        handlers.delete_pod(pod)
    live.clear()
    pending.clear()
    # The scheduler's snapshot holds the pods of the last cycle until the next one refreshes it.
    scheduler.cache.update_snapshot(scheduler.snapshot)
    client.bindings.clear()
    client.events.clear()
    client.conditions.clear()


async def test_engine_per_pod_state_returns_to_baseline_after_churn() -> None:
    scheduler, handlers, client = _engine()
    await _churn(scheduler, handlers, client, 30)
    gc.collect()
    baseline = _per_pod_sizes(scheduler)
    await _churn(scheduler, handlers, client, 400)
    gc.collect()
    assert _per_pod_sizes(scheduler) == baseline
    assert all(v == 0 for k, v in baseline.items() if not k.endswith(".memo")), baseline
    assert baseline["kopf-scheduler.PodTopologySpread.memo"] > 0  # the churn did exercise the memos


def test_volume_assume_cache_forgets_objects_deleted_while_assumed() -> None:
    """A PVC assumed (bound in memory) and then deleted before its write was observed must not
    linger: ``get`` is never asked for it again, so ``items`` prunes it."""
    from kopf_scheduler.api import kinds
    from kopf_scheduler.plugins.volume_binding.assume_cache import AssumeCache

    raw = {"metadata": {"name": "c", "namespace": "ns", "resourceVersion": "1"}}
    base = kinds.PERSISTENT_VOLUME_CLAIM.parse(raw)
    assumed = kinds.PERSISTENT_VOLUME_CLAIM.parse({**raw, "spec": {"volumeName": "v"}})
    objects: dict[str, dict[str, Any]] = {"PersistentVolumeClaim": {"ns/c": base}}
    cache = AssumeCache(kinds.PERSISTENT_VOLUME_CLAIM)
    cache.assume("ns/c", base, assumed)
    assert dict(cache.items(objects)) == {"ns/c": assumed} and cache.is_assumed("ns/c")
    del objects["PersistentVolumeClaim"]["ns/c"]
    assert dict(cache.items(objects)) == {}
    assert not cache.is_assumed("ns/c")
