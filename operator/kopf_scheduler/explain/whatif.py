"""What-if on a snapshot: overlay extra objects and compare where the pending pods go.

``simulate --from-cluster`` answers "what would this profile edit (or these new nodes) change?"
before anything is applied. Two runs of the ordinary offline simulation over the same snapshot:

- *now*: the cluster as it is, plus only the extra Pods (they are the workload asked about);
- *what-if*: the cluster with every extra object overlaid (a changed SchedulerProfile replaces
  the one serving its schedulerName; a Node, Pod or other object replaces the one of the same
  name or is added).

Both use the same tie-breaking seed, so a difference comes from the overlay, not from chance.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kopf_scheduler.simulate import Inputs, PodOutcome, simulate

__all__ = ["Placement", "overlay", "pods_only", "what_if"]


@dataclass(slots=True)
class Placement:
    namespace: str
    name: str
    now: PodOutcome
    what_if: PodOutcome

    @property
    def changed(self) -> bool:
        return (self.now.node, self.now.nominated_node, self.now.victims) != (
            self.what_if.node,
            self.what_if.nominated_node,
            self.what_if.victims,
        )


def overlay(base: Inputs, extra: Inputs) -> Inputs:
    """``base`` with ``extra``'s objects replacing same-named ones and the rest added."""
    nodes = {n.name: n for n in base.nodes}
    nodes.update({n.name: n for n in extra.nodes})
    extra_pods = {p.key for p in [*extra.running, *extra.pending]}
    running = [p for p in base.running if p.key not in extra_pods] + list(extra.running)
    pending = [p for p in base.pending if p.key not in extra_pods] + list(extra.pending)
    profiles = {p.scheduler_name: p for p in base.profiles}
    profiles.update({p.scheduler_name: p for p in extra.profiles})
    objects = {kind: dict(items) for kind, items in base.objects.items()}
    for kind, items in extra.objects.items():
        objects.setdefault(kind, {}).update(items)
    return Inputs(
        list(nodes.values()),
        running,
        pending,
        list(profiles.values()),
        objects,
        extra.config or base.config,
        base.serve_default and extra.serve_default,
    )


def pods_only(extra: Inputs) -> Inputs:
    """The extra inputs' Pods alone: the workload for the *now* run."""
    return Inputs(running=list(extra.running), pending=list(extra.pending))


async def what_if(base: Inputs, extra: Inputs, seed: int = 0) -> list[Placement]:
    """Each pending pod's outcome now and with the overlay, in the what-if run's pod order."""
    now_inputs = overlay(base, pods_only(extra))
    after_inputs = overlay(base, extra)
    now = {(o.namespace, o.name): o for o in await simulate(now_inputs, seed)}
    after = await simulate(after_inputs, seed)
    out: list[Placement] = []
    for o in after:
        before = now.get((o.namespace, o.name))
        if before is None:  # a pod the overlay itself made pending
            before = PodOutcome(o.namespace, o.name, "", "not pending now")
        out.append(Placement(o.namespace, o.name, before, dataclasses.replace(o)))
    return out
