"""A compact, size-bounded per-plugin summary of a failed scheduling attempt, for a pod annotation.

Off by default (``kopf-scheduler run --explain-annotation``), like kube-scheduler-simulator's result
annotations, but aggregated: per Filter plugin, each reason and how many nodes gave it, plus the
PreFilter and PostFilter (preemption) messages. Counting instead of listing nodes keeps it small on
any cluster; it is cut to :data:`MAX_BYTES` by dropping the rarest reasons (``truncated`` says how
many). ``kopf-scheduler explain`` gives the full per-node view.

Beside :class:`~kopf_scheduler.framework.diagnosis.FitError`, whose message it summarizes another way:
pure, so the edge that writes it (``cluster/explain_annotation.py``) imports no offline room.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kopf_scheduler.framework.diagnosis import FitError
    from kopf_scheduler.framework.interface import Status

__all__ = ["ANNOTATION", "MAX_BYTES", "fit_summary"]

ANNOTATION = "kopfscheduler.io/scheduling-result"
MAX_BYTES = 4096  # well under the apiserver's 256 KiB for all annotations of an object
_MAX_TEXT = 512


def _short(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 4] + " ..."


def _count(counts: dict[str, dict[str, int]], status: Status, n: int) -> None:
    per_plugin = counts.setdefault(status.plugin or "PreFilter", {})
    for reason in status.reasons or [""]:
        per_plugin[_short(reason)] = per_plugin.get(_short(reason), 0) + n


def _dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def fit_summary(fit: FitError, profile: str, limit: int = MAX_BYTES) -> str:
    """JSON: ``{"profile", "nodes", "filter": {plugin: {reason: nodes}}, "preFilter"?, "postFilter"?}``."""
    diagnosis = fit.diagnosis
    statuses = diagnosis.node_to_status
    shared: dict[int, tuple[Status, int]] = {}  # a status object is often shared by many nodes
    for status in statuses.values():
        hit = shared.get(id(status))
        shared[id(status)] = (status, hit[1] + 1 if hit is not None else 1)
    counts: dict[str, dict[str, int]] = {}
    for status, n in shared.values():
        _count(counts, status, n)
    absent = fit.num_all_nodes - len(statuses)
    if absent > 0 and statuses.absent_nodes_status.reasons:
        _count(counts, statuses.absent_nodes_status, absent)
    doc: dict[str, Any] = {"profile": profile, "nodes": fit.num_all_nodes, "filter": counts}
    if diagnosis.pre_filter_msg:
        doc["preFilter"] = _short(diagnosis.pre_filter_msg)
    if diagnosis.post_filter_msg:
        doc["postFilter"] = _short(diagnosis.post_filter_msg)
    text = _dumps(doc)
    dropped = 0
    while len(text.encode()) > limit:
        entries = [(n, plugin, reason) for plugin, rs in counts.items() for reason, n in rs.items()]
        if entries:  # the rarest reason goes first
            _, plugin, reason = min(entries)
            del counts[plugin][reason]
            if not counts[plugin]:
                del counts[plugin]
            dropped += 1
            doc["truncated"] = dropped
        elif "postFilter" in doc:
            del doc["postFilter"]
        elif "preFilter" in doc:
            del doc["preFilter"]
        else:
            break
        text = _dumps(doc)
    return text
