"""The devices in use as PreFilter sees them, kept up to date as claims change (issue 30).

The tracker keeps an index of allocated devices and brings it up to date from the claims that
changed; these tests change claims the ways the informers and the in-memory client do (a view
replaced, a key removed, a claim assumed after an API write) and check that the next pod sees the
change, and that the index always equals gathering every claim afresh.
"""

from __future__ import annotations

import random
from typing import Any

from dra_builders import device, device_class, resource_slice

from kopf_scheduler.api.objects import Node, parse_pod
from kopf_scheduler.api.resource import (
    ResourceClaim,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from kopf_scheduler.dra.manager import ClaimTracker, DraManager
from kopf_scheduler.dra.state import AllocatedState, gather_allocated_state
from kopf_scheduler.framework.interface import CycleState
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler.plugins.dynamic_resources import STATE_KEY, DynamicResources

DRIVER = "gpu.example.com"


class Handle:
    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects
        self.client = MemoryClusterClient(objects=objects)
        self.dra = DraManager(objects)


class NodeInfo:
    def __init__(self, name: str) -> None:
        self.node = Node(name=name)


def claim(name: str, device_name: str | None = None, rv: str = "1", **result: Any) -> ResourceClaim:
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    if device_name is not None:
        entry = {"request": "gpu", "driver": DRIVER, "pool": "p", "device": device_name, **result}
        raw["status"] = {"allocation": {"devices": {"results": [entry]}}}
    return parse_resource_claim(raw)


def world(*claims: ResourceClaim, gpus: int = 1) -> tuple[DynamicResources, dict[str, dict[str, Any]]]:
    gpu_slice = resource_slice("s", "node-1", "p", DRIVER, *(device(f"gpu-{i}") for i in range(gpus)))
    objects: dict[str, dict[str, Any]] = {
        "DeviceClass": {"gpu": parse_device_class(device_class("gpu", DRIVER))},
        "ResourceSlice": {"s": parse_resource_slice(gpu_slice)},
        "ResourceClaim": {c.key: c for c in claims},
    }
    return DynamicResources(handle=Handle(objects)), objects  # type: ignore[arg-type]


def devices_for(plugin: DynamicResources, claim_name: str) -> list[str] | str:
    """One cycle of a pod using the claim on node-1: the devices it would get, or Filter's message."""
    raw = {
        "metadata": {"name": f"pod-{claim_name}", "namespace": "default", "uid": f"uid-pod-{claim_name}"},
        "spec": {
            "containers": [{"name": "c"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
        },
    }
    pod, state = parse_pod(raw), CycleState()
    _, status = plugin.pre_filter(state, pod, [])
    assert status is None
    status = plugin.filter(state, pod, NodeInfo("node-1"))  # type: ignore[arg-type]
    if status is not None:
        return status.message
    (allocation,) = state.get(STATE_KEY).node_allocations["node-1"]
    return [r.device for r in allocation.results]


def test_a_deallocated_claim_frees_its_device_for_the_next_pod() -> None:
    plugin, objects = world(claim("a", "gpu-0"), claim("b"))
    assert devices_for(plugin, "b") == "cannot allocate all claims"
    objects["ResourceClaim"]["default/a"] = claim("a", rv="2")  # the informer's new view
    assert devices_for(plugin, "b") == ["gpu-0"]


def test_a_deleted_claim_frees_its_device_and_a_new_one_takes_it() -> None:
    plugin, objects = world(claim("a", "gpu-0"), claim("b"), gpus=2)
    assert devices_for(plugin, "b") == ["gpu-1"]
    del objects["ResourceClaim"]["default/a"]
    assert devices_for(plugin, "b") == ["gpu-0"]
    # A key gone and another come: compared key by key, the newcomer's device is taken.
    del objects["ResourceClaim"]["default/b"]
    objects["ResourceClaim"]["default/c"] = claim("c", "gpu-0")
    objects["ResourceClaim"]["default/b"] = claim("b")
    assert devices_for(plugin, "b") == ["gpu-1"]


def test_an_update_that_changes_the_allocation_replaces_it() -> None:
    plugin, objects = world(claim("a", "gpu-0"), claim("b"), gpus=2)
    assert devices_for(plugin, "b") == ["gpu-1"]
    objects["ResourceClaim"]["default/a"] = claim("a", "gpu-1", rv="2")
    assert devices_for(plugin, "b") == ["gpu-0"]


def test_an_assumed_allocation_is_counted_until_restored() -> None:
    plugin, objects = world(claim("a"), claim("b"))
    assert devices_for(plugin, "b") == ["gpu-0"]
    tracker = plugin.tracker
    tracker.assume(claim("a", "gpu-0", rv="5"))  # PreBind's write, not yet seen by the informer
    assert devices_for(plugin, "b") == "cannot allocate all claims"
    objects["ResourceClaim"]["default/a"] = claim("a", rv="3")  # an older view arrives: still assumed
    assert devices_for(plugin, "b") == "cannot allocate all claims"
    tracker.restore("default", "a")
    assert devices_for(plugin, "b") == ["gpu-0"]
    # The informer catching up replaces the assumed claim with its own view: still counted.
    tracker.assume(claim("a", "gpu-0", rv="5"))
    assert devices_for(plugin, "b") == "cannot allocate all claims"
    objects["ResourceClaim"]["default/a"] = claim("a", "gpu-0", rv="6")
    assert devices_for(plugin, "b") == "cannot allocate all claims"
    objects["ResourceClaim"]["default/a"] = claim("a", rv="7")  # then deallocated
    assert devices_for(plugin, "b") == ["gpu-0"]


def test_a_pending_allocation_is_counted_until_written_or_dropped() -> None:
    plugin, _ = world(claim("a"), claim("b"))
    tracker = plugin.tracker
    tracker.signal_pending("uid-a", claim("a", "gpu-0"))  # Reserve's, before PreBind
    assert devices_for(plugin, "b") == "cannot allocate all claims"
    tracker.remove_pending("uid-a")  # Unreserve
    assert devices_for(plugin, "b") == ["gpu-0"]


def _gathered(tracker: ClaimTracker, objects: dict[str, dict[str, Any]], names: list[str]) -> AllocatedState:
    """What PreFilter saw before the index: every claim gathered, then the pending ones."""
    state = gather_allocated_state(tracker.all())
    for name in names:
        uid = f"uid-{name}"
        pending = tracker.get_pending(uid)
        if pending is None:
            continue
        stored = objects["ResourceClaim"].get(pending.key)
        if pending.status.allocation is None or (
            stored is not None and stored.metadata.uid == uid and stored.status.allocation is not None
        ):
            continue
        state.add_allocation(pending.status.allocation)
    return state


def test_the_index_equals_gathering_every_claim_through_random_changes() -> None:
    """Claims replaced, deleted, re-added, assumed, restored and pending, with devices held
    whole, twice (a broken cluster), or as shares with consumed capacity: after each change the
    state equals gathering every claim afresh."""
    rng = random.Random(30)
    objects: dict[str, dict[str, Any]] = {"ResourceClaim": {}}
    tracker = ClaimTracker(objects)
    store = objects["ResourceClaim"]
    version = 10

    def random_claim(name: str) -> ResourceClaim:
        nonlocal version
        version += 1
        roll = rng.random()
        if roll < 0.3:
            return claim(name, rv=str(version))
        gpu = f"gpu-{rng.randrange(4)}"
        if roll < 0.6:
            return claim(name, gpu, rv=str(version))
        share = {
            "shareID": f"share-{rng.randrange(3)}",
            "consumedCapacity": {"memory": f"{rng.randrange(1, 4)}Gi"},
        }
        return claim(name, gpu, rv=str(version), **share)

    names = [f"c{i}" for i in range(8)]
    for _ in range(400):
        name = rng.choice(names)
        key = f"default/{name}"
        action = rng.random()
        if action < 0.45:
            store[key] = random_claim(name)
        elif action < 0.6:
            store.pop(key, None)
        elif action < 0.75 and key in store:
            tracker.assume(random_claim(name))
        elif action < 0.85:
            tracker.restore("default", name)
        elif action < 0.95:
            tracker.signal_pending(f"uid-{name}", random_claim(name))
        else:
            tracker.remove_pending(f"uid-{name}")
        expected = _gathered(tracker, objects, names)
        got = tracker.allocated_state()
        assert got.allocated_devices == expected.allocated_devices
        assert got.allocated_shared_device_ids == expected.allocated_shared_device_ids
        assert got.aggregated_capacity.keys() == expected.aggregated_capacity.keys()
        for device_id, total in expected.aggregated_capacity.items():
            for capacity in {*total, *got.aggregated_capacity[device_id]}:
                assert got.aggregated_capacity[device_id].get(capacity, 0) == total.get(capacity, 0)
