"""Explanations as JSON (the stable schema of docs/explain.md) and as a terminal table.

The table stays readable on large clusters: rejected nodes with the same verdicts form one row
("37 nodes: a, b, c, ..."), feasible nodes are listed best first and cut at ``top``, and
``node`` narrows everything to one node with its per-plugin detail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kopf_scheduler.explain.engine import Explanation, NodeExplanation

__all__ = ["SCHEMA_VERSION", "to_json", "to_table"]

SCHEMA_VERSION = "kopfscheduler.io/explain/v1"
_NAMES_SHOWN = 5


def _node_json(n: NodeExplanation) -> dict[str, Any]:
    return {
        "name": n.name,
        "feasible": n.feasible,
        "filters": dict(n.filters),
        "rejectedBy": n.rejected_by,
        "reason": n.reason,
        "scores": {
            p: {"raw": s.raw, "normalized": s.normalized, "weighted": s.weighted} for p, s in n.scores.items()
        },
        "total": n.total,
        "obstacles": list(n.obstacles),
    }


def _selected(e: Explanation, node: str | None, top: int | None) -> list[NodeExplanation]:
    if node is not None:
        return [n for n in e.nodes if n.name == node]
    feasible = sorted((n for n in e.nodes if n.feasible), key=lambda n: (-(n.total or 0), n.name))
    rejected = [n for n in e.nodes if not n.feasible]
    if top is not None:
        feasible = feasible[:top]
        rejected = e.closest(top)
    return feasible + rejected


def to_json(e: Explanation, node: str | None = None, top: int | None = None) -> dict[str, Any]:
    """The documented schema; ``nodes`` holds every node unless ``node``/``top`` narrow it."""
    return {
        "schema": SCHEMA_VERSION,
        "pod": e.pod,
        "profile": e.profile,
        "numNodes": e.num_nodes,
        "chosen": e.chosen,
        "tied": list(e.tied),
        "reason": e.reason,
        "message": e.message,
        "skippedFilters": list(e.skipped_filters),
        "nodes": [_node_json(n) for n in _selected(e, node, top)],
        "closest": [n.name for n in e.closest()],
        "preemption": (
            None
            if e.preemption is None
            else {
                "nominatedNode": e.preemption.nominated_node,
                "victims": list(e.preemption.victims),
                "message": e.preemption.message,
            }
        ),
        "notes": list(e.notes),
    }


def _grid(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(f"{c:<{w}}" for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip() for r in rows
    ]


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    more = len(names) - _NAMES_SHOWN
    return (
        f"{len(names)} nodes: {shown}" + (f", ... (+{more})" if more > 0 else "") if len(names) > 1 else shown
    )


def _verdicts(n: NodeExplanation) -> str:
    failed = [f"{p}: {r}" for p, r in n.filters.items() if r is not None]
    if failed:
        return "; ".join(failed)
    return f"{n.rejected_by or 'PreFilter'}: {n.reason}" if n.reason else "-"


def _node_detail(e: Explanation, n: NodeExplanation) -> list[str]:
    lines = [f"Node {n.name}: {'feasible' if n.feasible else 'rejected'}"]
    if n.reason:
        lines.append(f"  reported: {n.rejected_by or 'PreFilter'}: {n.reason}")
    if n.filters:
        lines.append("  filters:")
        lines += [f"    {p:<32} {r if r is not None else 'passed'}" for p, r in n.filters.items()]
    if e.skipped_filters:
        lines.append(f"  skipped (nothing to check for this pod): {', '.join(e.skipped_filters)}")
    if n.scores:
        rows = [["    PLUGIN", "RAW", "NORMALIZED", "WEIGHTED"]]
        rows += [[f"    {p}", str(s.raw), str(s.normalized), str(s.weighted)] for p, s in n.scores.items()]
        lines.append("  scores:")
        lines += _grid(rows)
        lines.append(f"  total: {n.total}")
    if n.obstacles:
        lines.append("  in the way: " + "; ".join(n.obstacles))
    return lines


def to_table(e: Explanation, node: str | None = None, top: int | None = 10) -> str:
    lines = [f"Pod {e.pod}  profile {e.profile}  nodes {e.num_nodes}"]
    if e.chosen:
        lines.append(f"Would bind to: {e.chosen}")
    else:
        lines.append(f"{'Unschedulable' if e.reason == 'Unschedulable' else 'Scheduling error'}: {e.message}")
    lines += [f"Note: {note}" for note in e.notes]
    if node is not None:
        found = e.node(node)
        lines.append("")
        lines += _node_detail(e, found) if found is not None else [f"node {node} is not in the snapshot"]
        return "\n".join(lines)

    feasible = sorted((n for n in e.nodes if n.feasible), key=lambda n: (-(n.total or 0), n.name))
    if feasible:
        plugins = list(feasible[0].scores)
        lines.append("")
        lines.append("Feasible nodes, best first (cells: raw/normalized/weighted):")
        rows = [["NODE", "TOTAL", *plugins]]
        shown = feasible if top is None else feasible[:top]
        for n in shown:
            cells = [f"{s.raw}/{s.normalized}/{s.weighted}" for s in (n.scores[p] for p in plugins)]
            rows.append([n.name, str(n.total), *cells])
        lines += _grid([[*r, ""] for r in rows])
        if len(shown) < len(feasible):
            lines.append(f"... {len(feasible) - len(shown)} more feasible nodes (--top)")

    rejected = [n for n in e.nodes if not n.feasible]
    if rejected:
        groups: dict[tuple[Any, ...], list[str]] = {}
        for n in rejected:
            groups.setdefault((_verdicts(n), tuple(n.obstacles)), []).append(n.name)
        lines.append("")
        lines.append("Rejected nodes (grouped by identical verdicts):")
        rows = [["NODES", "FILTER VERDICTS", "IN THE WAY"]]
        for (verdicts, obstacles), names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            rows.append([_names(names), verdicts, "; ".join(obstacles) or "-"])
        lines += _grid(rows)
    if e.skipped_filters:
        lines.append(f"Skipped filters (nothing to check for this pod): {', '.join(e.skipped_filters)}")
    if e.preemption is not None:
        p = e.preemption
        lines.append("")
        if p.nominated_node:
            lines.append(
                f"Preemption: would nominate {p.nominated_node}, evicting {', '.join(p.victims) or 'nobody'}"
            )
        else:
            lines.append(f"Preemption would not help: {p.message.removeprefix('preemption: ')}")
    if not e.chosen and rejected:
        lines.append("")
        lines.append("Closest nodes:")
        lines += [f"  {n.name}: {'; '.join(n.obstacles) or n.reason}" for n in e.closest()]
    return "\n".join(lines)
