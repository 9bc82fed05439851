"""``kopf-scheduler explain`` and the explain/what-if modes of ``simulate``: CLI glue only.

The live cluster is read once through :mod:`kopf_scheduler.cluster.listing` (read-only); the rest
is the pure engine. Exit codes: 0 answered, 1 the pod/profile/node was not found or the cluster
could not be read, 2 bad input files.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from kopf_scheduler.config import features
from kopf_scheduler.explain.engine import ExplainError, explain
from kopf_scheduler.explain.render import to_json, to_table
from kopf_scheduler.explain.whatif import overlay, what_if
from kopf_scheduler.simulate import (
    Inputs,
    SimulationError,
    add_feature_gates_argument,
    dataclass_dict,
    documents_to_inputs,
    feature_gates,
    load_documents,
)

__all__ = ["add_arguments", "add_explain_view_arguments", "run", "run_from_cluster", "run_simulate_explain"]


def add_explain_view_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``explain`` and ``simulate --explain``."""
    parser.add_argument("--profile", default=None, help="explain with this profile (schedulerName) instead")
    parser.add_argument("--node", default=None, help="show only this node, in detail")
    parser.add_argument(
        "--top", type=int, default=None, help="feasible nodes and closest rejected nodes shown (table: 10)"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pod", metavar="NAMESPACE/POD")
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--context", default=None)
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="a KubeSchedulerConfiguration (or any objects) overlaid on the live snapshot, "
        "e.g. the file `run --config` was given",
    )
    add_feature_gates_argument(parser)
    add_explain_view_arguments(parser)


def _pod_key(text: str) -> str:
    return text if "/" in text else f"default/{text}"


def _live_inputs(args: argparse.Namespace) -> tuple[Inputs, list[str]]:
    from kopf_scheduler.cluster.listing import list_cluster

    listing = asyncio.run(list_cluster(args.kubeconfig, getattr(args, "context", None)))
    return documents_to_inputs(listing.documents), listing.notes


def _print_explanation(inputs: Inputs, key: str, args: argparse.Namespace, notes: list[str]) -> int:
    try:
        e = explain(inputs, _pod_key(key), args.profile)
    except ExplainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    e.notes[:0] = notes
    if args.node is not None and e.node(args.node) is None:
        print(f"error: node {args.node} is not in the cluster", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(to_json(e, args.node, args.top), indent=2))
    else:
        print(to_table(e, args.node, 10 if args.top is None else args.top))
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        gates = feature_gates(args)
    except features.FeatureGateError as exc:
        print(f"error: --feature-gates: {exc}", file=sys.stderr)
        return 2
    with features.using(gates):
        return _run_live(args)


def _run_live(args: argparse.Namespace) -> int:
    try:
        extra = load_documents([args.config]) if getattr(args, "config", None) else None
    except SimulationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        inputs, notes = _live_inputs(args)
    except SimulationError as exc:
        print(f"error: the cluster holds an object the scheduler cannot read: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # credentials, connection, API errors: say what, not a traceback
        print(f"error: listing the cluster failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if extra is not None:
        inputs = overlay(inputs, extra)
    return _print_explanation(inputs, args.pod, args, notes)


def run_simulate_explain(args: argparse.Namespace) -> int:
    """``simulate FILE... --explain NS/POD``: the same explanation, offline."""
    try:
        inputs = load_documents(args.files)
    except SimulationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return _print_explanation(inputs, args.explain, args, [])


def _placements_json(placements: list[Any]) -> dict[str, Any]:
    return {
        "pods": [
            {
                "namespace": p.namespace,
                "name": p.name,
                "now": dataclass_dict(p.now),
                "whatIf": dataclass_dict(p.what_if),
                "changed": p.changed,
            }
            for p in placements
        ]
    }


def _placements_table(placements: list[Any]) -> str:
    rows = [["POD", "NOW", "WHAT-IF", "CHANGED", "MESSAGE (WHAT-IF)"]]
    for p in placements:
        now = p.now.node or (
            f"<none> (nominated {p.now.nominated_node})" if p.now.nominated_node else "<none>"
        )
        after = p.what_if.node or (
            f"<none> (nominated {p.what_if.nominated_node})" if p.what_if.nominated_node else "<none>"
        )
        rows.append([f"{p.namespace}/{p.name}", now, after, "yes" if p.changed else "", p.what_if.message])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join([*(f"{c:<{w}}" for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip() for r in rows
    ]
    changed = sum(p.changed for p in placements)
    lines.append(f"{changed} of {len(placements)} pending pods change placement")
    return "\n".join(lines)


def run_from_cluster(args: argparse.Namespace) -> int:
    """``simulate --from-cluster [EXTRA...]``: the live snapshot with the extra objects overlaid."""
    try:
        extra = load_documents(args.files) if args.files else Inputs()
    except SimulationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        base, notes = _live_inputs(args)
    except Exception as exc:
        print(f"error: listing the cluster failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.explain:
        return _print_explanation(overlay(base, extra), args.explain, args, notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    seed = 0 if args.seed is None else args.seed
    placements = asyncio.run(what_if(base, extra, seed))
    if args.output == "json":
        print(json.dumps(_placements_json(placements), indent=2))
    else:
        print(_placements_table(placements))
    return 0
