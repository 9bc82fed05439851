"""What stands between a pod and a node that rejected it, in words a platform engineer acts on.

The verdict itself always comes from the plugins (see :mod:`.engine`); this module only turns a
rejection into the size of the gap ("needs 1.5 cpu more") or the object in the way ("taint
dedicated=gpu:NoSchedule not tolerated"), using the plugins' own helpers (``fits_request``,
``find_untolerated_taint``) with the profile's own plugin configuration. A plugin without a
translation here is shown with its reason unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kopf_scheduler.plugins.node_resources_fit import NodeResourcesFit, fits_request
from kopf_scheduler.plugins.taint_toleration import find_untolerated_taint

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.framework.interface import Status
    from kopf_scheduler.framework.runtime import Framework
    from kopf_scheduler.framework.types import NodeInfo

__all__ = ["format_cpu", "format_memory", "obstacles"]

_MI = 1024**2
_GI = 1024**3


def format_cpu(milli: int) -> str:
    """Millicores as cores: 1500 -> "1.5", 250 -> "0.25"."""
    return f"{milli / 1000:.3f}".rstrip("0").rstrip(".")


def format_memory(amount: int) -> str:
    """Bytes in the largest binary unit that keeps it readable: 1.5Gi, 300Mi, 512Ki."""
    for unit, size in (("Gi", _GI), ("Mi", _MI), ("Ki", 1024)):
        if amount >= size:
            return f"{amount / size:.2f}".rstrip("0").rstrip(".") + unit
    return str(amount)


def _amount(resource: str, value: int) -> str:
    if resource == "cpu":
        return f"{format_cpu(value)} cpu"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return f"{format_memory(value)} {resource}"
    return f"{value} {resource}"


def _resources(fw: Framework, pod: Pod, info: NodeInfo, status: Status) -> tuple[list[str], float]:
    # The profile's own ignored resources (an out-of-tree plugin registered under the name: none).
    plugin = fw.plugins.get("NodeResourcesFit")
    ignored: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    if isinstance(plugin, NodeResourcesFit):
        ignored, groups = plugin.ignored, plugin.ignored_groups
    out: list[str] = []
    gap = 0.0
    for r in fits_request(pod.requests, info, ignored, groups):
        if r.resource_name == "pods":
            out.append(f"node already runs {r.used}/{r.capacity} pods")
            gap += 1.0
        elif r.unresolvable:
            out.append(
                f"requests {_amount(r.resource_name, r.requested)}, more than the node's allocatable "
                f"{_amount(r.resource_name, r.capacity)}"
            )
            gap += 100.0 + (r.requested - r.capacity) / r.requested  # only a larger node helps
        else:
            short = r.requested - (r.capacity - r.used)
            out.append(f"needs {_amount(r.resource_name, short)} more")
            gap += short / r.requested if r.requested else 1.0
    if not out:  # the node itself has room: pods nominated to it (preemptors) hold it
        held = [
            p.key
            for p in fw.nominated_pods_for_node(info.name)
            if p.priority >= pod.priority and p.uid != pod.uid
        ]
        if held:
            return [f"room held for nominated pod(s) {', '.join(held)}"], 5.0
    return out or [status.message], gap


def _taints(fw: Framework, pod: Pod, info: NodeInfo, status: Status) -> tuple[list[str], float]:
    node = info.node
    taint = find_untolerated_taint(node.taints, pod.tolerations) if node is not None else None
    if taint is None:
        return [status.message], 10.0
    value = f"={taint.value}" if taint.value else ""
    return [f"taint {taint.key}{value}:{taint.effect} not tolerated"], 10.0


def _affinity(fw: Framework, pod: Pod, info: NodeInfo, status: Status) -> tuple[list[str], float]:
    """Name the nodeSelector labels the node lacks; a required nodeAffinity is shown as the plugin says."""
    node = info.node
    labels = node.labels if node is not None else {}
    missing = [f"{k}={v}" for k, v in sorted(pod.node_selector.items()) if labels.get(k) != v]
    if missing:
        return [f"node lacks label(s) {', '.join(missing)} (nodeSelector)"], 10.0
    return [f"NodeAffinity: {status.message}"], 10.0


def _cordoned(fw: Framework, pod: Pod, info: NodeInfo, status: Status) -> tuple[list[str], float]:
    return ["node is cordoned (spec.unschedulable)"], 10.0


_TRANSLATORS: Mapping[str, Callable[[Any, Any, Any, Any], tuple[list[str], float]]] = {
    "NodeResourcesFit": _resources,
    "TaintToleration": _taints,
    "NodeAffinity": _affinity,
    "NodeUnschedulable": _cordoned,
}


def obstacles(
    fw: Framework, pod: Pod, info: NodeInfo, verdicts: Mapping[str, Status | None]
) -> tuple[list[str], float]:
    """("what is in the way" lines, distance) for one rejected node; distance orders closeness.

    A resource shortfall counts by its size relative to the request (a node short of 10% of the
    request is closer than one short of all of it); anything else (a taint, an affinity, a
    port) counts as a change to the node or the pod, a larger step.
    """
    lines: list[str] = []
    distance = 0.0
    for plugin, status in verdicts.items():
        if status is None:
            continue
        translate = _TRANSLATORS.get(plugin)
        if translate is not None:
            found, gap = translate(fw, pod, info, status)
        else:
            found, gap = [f"{plugin}: {status.message}"], 10.0
        lines.extend(found)
        distance += gap
    return lines, distance
