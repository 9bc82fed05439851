"""Scheduler extenders as the engine sees them: the reference's ``fwk.Extender`` and the rules
``schedule_one.go`` and the preemption evaluator follow when using them.

An extender is an outside service the scheduler asks, per pod, to filter and score nodes, to pick
among preemption candidates and to bind (kube-scheduler v1.37.2's ``extender.go``). The engine only
awaits this protocol; the edge implements it over HTTP (``cluster/extender.py``) and the tests in
memory. Its failures are exceptions whose ``str()`` reads as the reference's ``err.Error()``
(:class:`ExtenderError` at the edge), because that text becomes the pod's FailedScheduling note.

Extenders are the one thing in a scheduling cycle that waits on the network, so the scheduler runs
its cycle as a coroutine only when some are configured; without them nothing here is reached, and
the coroutines that could wait on one never suspend (:func:`run_now` completes them in place).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from kopf_scheduler.config.gotext import go_quote
from kopf_scheduler.framework.interface import MAX_NODE_SCORE, Code, Status

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.framework.diagnosis import NodeToStatus
    from kopf_scheduler.framework.interface import NodeLister
    from kopf_scheduler.framework.types import NodeInfo

__all__ = [
    "EXTENDER_NAME",
    "MAX_EXTENDER_PRIORITY",
    "Extender",
    "ExtenderError",
    "FilterResult",
    "MetaVictims",
    "Victims",
    "extender_scores",
    "extenders_binding",
    "find_nodes_that_pass_extenders",
    "process_preemption",
    "run_now",
    "uses_managed_resources",
]

log = logging.getLogger(__name__)

MAX_EXTENDER_PRIORITY = 10  # extenderv1.MaxExtenderPriority: scores are scaled up to MAX_NODE_SCORE
# The fake plugin a pod is unschedulable for when extenders filtered nodes out: extenders register
# no events, so such a pod is moved back to the queue by any cluster event (as the reference does).
EXTENDER_NAME = "Extender"

T = TypeVar("T")


class ExtenderError(Exception):
    """An extender call failed; ``str()`` is the reference's error text (``Post "URL": dial tcp ...:
    connect: connection refused``, ``failed filter with extender at URL URL, code 500``, or the
    extender's own ``Error``)."""


@dataclass(slots=True)
class FilterResult:
    """``ExtenderFilterResult``, the nodes by name: those that pass (a subset of the input), and the
    failure reason of the others it chose to explain (resolvable or not by preemption)."""

    node_names: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    failed_and_unresolvable: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Victims:
    """``extenderv1.Victims``: the pods preemption would evict on one node."""

    pods: list[Pod]
    num_pdb_violations: int = 0


@dataclass(slots=True)
class MetaVictims:
    """``extenderv1.MetaVictims``: victims by uid, as an extender answers a preemption."""

    uids: list[str]
    num_pdb_violations: int = 0


@runtime_checkable
class Extender(Protocol):
    """One configured extender (``fwk.Extender``). Every call may raise; what it raises is its
    error, and ``str()`` of it is the message the reference would show."""

    @property
    def name(self) -> str:
        """Its URL prefix: how logs name it."""
        ...

    def is_ignorable(self) -> bool:
        """Scheduling goes on without it when it fails (``ignorable``)."""
        ...

    def is_filter(self) -> bool: ...

    def is_prioritizer(self) -> bool: ...

    def is_binder(self) -> bool: ...

    def supports_preemption(self) -> bool: ...

    def is_interested(self, pod: Pod) -> bool:
        """Is this pod sent to it: it manages no resources, or the pod asks for one it manages."""
        ...

    def ignored_resources(self) -> Sequence[str]:
        """The managed resources it marks ``ignoredByScheduler``: NodeResourcesFit does not check them."""
        ...

    async def filter(self, pod: Pod, nodes: Sequence[NodeInfo]) -> FilterResult: ...

    async def prioritize(self, pod: Pod, nodes: Sequence[NodeInfo]) -> tuple[list[tuple[str, int]], int]:
        """``(host, score)`` in [0, MAX_EXTENDER_PRIORITY] per node, and the extender's weight."""
        ...

    async def bind(self, pod: Pod, node_name: str) -> None:
        """Bind the pod (the extender writes the Binding itself)."""
        ...

    async def process_preemption(
        self, pod: Pod, node_name_to_victims: Mapping[str, Victims]
    ) -> dict[str, MetaVictims]:
        """The candidates it accepts, and their victims, by uid (it may drop nodes or change them)."""
        ...


def uses_managed_resources(pod: Pod, managed: frozenset[str]) -> bool:
    """``IsInterested``: no managed resources, or a container or init container of the pod names one
    in its requests or limits (the pod as written: ``spec.containers``, ``spec.initContainers``)."""
    if not managed:
        return True
    return any(
        not managed.isdisjoint(c.requests) or not managed.isdisjoint(c.limits)
        for group in (pod.containers, pod.init_containers)
        for c in group
    )


async def find_nodes_that_pass_extenders(
    extenders: Sequence[Extender], pod: Pod, nodes: Sequence[NodeInfo], statuses: NodeToStatus
) -> list[NodeInfo]:
    """``findNodesThatPassExtenders``: the extenders in order, each given what the previous passed.

    The reasons an extender gives for the nodes it drops become those nodes' statuses, like a
    plugin's but with no plugin named (Unresolvable ones win when a node is in both maps); a node it
    drops without a reason gets none. An error fails the cycle unless the extender is ignorable. A
    node it claims that it was not given is an error too; the nodes that pass are the NodeInfos it
    was given (kube-scheduler v1.37.2 scores a non-nodeCacheCapable extender's answer on empty
    NodeInfos, kubernetes/kubernetes#141781; we score the nodes as they are, as its fix does).
    """
    feasible = list(nodes)
    for ext in extenders:
        if not feasible:
            break
        if not ext.is_filter() or not ext.is_interested(pod):
            continue
        try:
            result = await ext.filter(pod, feasible)
            by_name = {info.name: info for info in feasible}
            passed = []
            for name in result.node_names:
                info = by_name.get(name)
                if info is None:
                    raise ExtenderError(
                        f"extender {go_quote(ext.name)} claims a filtered node {go_quote(name)} "
                        "which is not found in the input node list"
                    )
                passed.append(info)
        except Exception as exc:
            if ext.is_ignorable():
                log.info("Skipping extender %s as it returned error and has ignorable flag set: %s", ext, exc)
                continue
            raise
        unresolvable = result.failed_and_unresolvable
        for name, msg in unresolvable.items():
            statuses.set(name, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, msg))
        for name, msg in result.failed.items():
            if name not in unresolvable:
                statuses.set(name, Status(Code.UNSCHEDULABLE, msg))
        feasible = passed
    return feasible


async def extender_scores(
    extenders: Sequence[Extender], pod: Pod, nodes: Sequence[NodeInfo]
) -> dict[str, int]:
    """The extenders' part of ``prioritizeNodes``: each interested prioritizer asked at once, its
    scores times its weight, scaled from MAX_EXTENDER_PRIORITY to MAX_NODE_SCORE, summed per node.
    A prioritizer that fails gives no scores (never an error, ignorable or not)."""
    asked = [e for e in extenders if e.is_prioritizer() and e.is_interested(pod)]
    if not asked:
        return {}
    answers = await asyncio.gather(*(e.prioritize(pod, nodes) for e in asked), return_exceptions=True)
    scale = MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY
    totals: dict[str, int] = {}
    for ext, answer in zip(asked, answers, strict=True):
        if isinstance(answer, BaseException):
            if not isinstance(answer, Exception):
                raise answer
            log.debug("extender %s gave no scores for %s: %s", ext.name, pod.key, answer)
            continue
        hosts, weight = answer
        for host, score in hosts:
            totals[host] = totals.get(host, 0) + score * weight * scale
    return totals


async def extenders_binding(extenders: Sequence[Extender], pod: Pod, node_name: str) -> bool:
    """``extendersBinding``: the first interested binder binds (True); its error is raised unless it
    is ignorable, then the next is tried. False: no extender bound, the Bind plugins do."""
    for ext in extenders:
        if not ext.is_binder() or not ext.is_interested(pod):
            continue
        try:
            await ext.bind(pod, node_name)
        except Exception as exc:
            if ext.is_ignorable():
                log.info(
                    "Skipping extender %s in bind as it returned error and has ignorable flag set: %s",
                    ext.name,
                    exc,
                )
                continue
            raise
        return True
    return False


def _victims(ext: Extender, answer: Mapping[str, MetaVictims], nodes: NodeLister) -> dict[str, Victims]:
    """``convertToVictims``: uids back to the pods on those nodes in the snapshot."""
    out: dict[str, Victims] = {}
    for node_name, meta in answer.items():
        info = nodes.get(node_name)
        if info is None or info.node is None:
            raise ExtenderError(f"nodeinfo not found for node name {go_quote(node_name)}")
        by_uid = {p.uid: p for p in info.pods}
        pods = []
        for uid in meta.uids:
            found = by_uid.get(uid)
            if found is None:
                # The reference formats the *MetaPod with %v: &{uid}.
                raise ExtenderError(
                    f"extender: {ext.name} claims to preempt pod (UID: &{{{uid}}}) on node: {node_name}, "
                    "but the pod is not found on that node"
                )
            pods.append(found)
        out[node_name] = Victims(pods, meta.num_pdb_violations)
    return out


async def process_preemption(
    extenders: Sequence[Extender], pod: Pod, victims: dict[str, Victims], nodes: NodeLister
) -> dict[str, Victims] | Status:
    """Preemption's ``callExtenders``: each interested extender that supports preemption narrows the
    candidates in turn. The candidates left, or an Error status; an ignorable extender's error, or
    a node it leaves no victims on, is skipped instead."""
    for ext in extenders:
        if not ext.supports_preemption() or not ext.is_interested(pod):
            continue
        try:
            answer = _victims(ext, await ext.process_preemption(pod, victims), nodes)
        except Exception as exc:
            if ext.is_ignorable():
                log.info("Skipped extender %s as it returned error and has ignorable flag set: %s", ext, exc)
                continue
            return Status(Code.ERROR, str(exc), error=exc)
        for node_name, chosen in list(answer.items()):
            if not chosen.pods:
                if ext.is_ignorable():
                    del answer[node_name]
                    continue
                return Status(Code.ERROR, f"expected at least one victim pod on node {go_quote(node_name)}")
        victims = answer
        if not victims:
            break
    return victims


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Complete a coroutine that does not suspend (one that would wait only on extenders, run with
    none), without an event loop: what lets the synchronous callers share the extenders' code."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a coroutine run in place waited on something")
