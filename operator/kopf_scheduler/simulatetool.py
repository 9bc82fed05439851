"""``kopf-scheduler simulate``: the command over simulate's engine and explain's views.

A module of its own so the dependency runs one way: ``explain`` builds on ``simulate``'s engine
(``Inputs``, ``simulate``), and only this command, above both, offers
``--explain`` and ``--from-cluster`` on ``simulate`` (the import contracts pin the order). The live
cluster is listed here (through :func:`kopf_scheduler.explaintool.live_inputs`) and handed to the
offline rooms as data.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable
from typing import Any

from kopf_scheduler.explain.whatif import Placement, overlay, what_if
from kopf_scheduler.explaintool import add_explain_view_arguments, live_inputs, print_explanation
from kopf_scheduler.simulate import (
    Inputs,
    PodOutcome,
    SimulationError,
    add_feature_gates_argument,
    dataclass_dict,
    load_documents,
    run_under_gates,
    simulate,
)

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="FILE", help="YAML/JSON files ('-' for stdin)")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument("--seed", type=int, default=None, help="seed for the tie-breaking random choice")
    add_feature_gates_argument(parser)
    _add_explain_arguments(parser)


def _add_explain_arguments(parser: argparse.ArgumentParser) -> None:
    """``--explain`` and ``--from-cluster``."""
    parser.add_argument("--explain", metavar="NAMESPACE/POD", default=None, help="explain this pod per node")
    parser.add_argument(
        "--from-cluster",
        action="store_true",
        help="snapshot the live cluster (read-only); FILEs are extra objects overlaid on it",
    )
    parser.add_argument("--kubeconfig", default=None, help="with --from-cluster")
    parser.add_argument("--context", default=None, help="with --from-cluster")
    add_explain_view_arguments(parser)


def run(args: argparse.Namespace) -> int:
    return run_under_gates(args, _run)


def _run(args: argparse.Namespace) -> int:
    if args.from_cluster or args.explain:
        if args.from_cluster:
            return _run_from_cluster(args)
        if not args.files:
            print("error: FILE required (or --from-cluster)", file=sys.stderr)
            return 2
        return _run_explain(args)
    if not args.files:
        print("error: FILE required (or --from-cluster)", file=sys.stderr)
        return 2
    try:
        inputs = load_documents(args.files)
    except SimulationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    outcomes = asyncio.run(simulate(inputs, args.seed))
    if args.output == "json":
        print(json.dumps({"pods": [dataclass_dict(o) for o in outcomes]}, indent=2))
    else:
        print(_table(outcomes))
    return 0


def _run_explain(args: argparse.Namespace) -> int:
    """``simulate FILE... --explain NS/POD``: explain's answer, offline."""
    try:
        inputs = load_documents(args.files)
    except SimulationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return print_explanation(inputs, args.explain, args, [])


def _run_from_cluster(args: argparse.Namespace) -> int:
    """``simulate --from-cluster [EXTRA...]``: the live snapshot with the extra objects overlaid."""
    try:
        extra = load_documents(args.files) if args.files else Inputs()
    except SimulationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        base, notes = live_inputs(args.kubeconfig, args.context)
    except Exception as exc:  # credentials, connection, API errors: say what, not a traceback
        print(f"error: listing the cluster failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.explain:
        return print_explanation(overlay(base, extra), args.explain, args, notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    seed = 0 if args.seed is None else args.seed
    placements = asyncio.run(what_if(base, extra, seed))
    if args.output == "json":
        print(json.dumps(_placements_json(placements), indent=2))
    else:
        print(_placements_table(placements))
    return 0


def _placements_json(placements: list[Placement]) -> dict[str, Any]:
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


def _placements_table(placements: list[Placement]) -> str:
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


def _table(outcomes: Iterable[PodOutcome]) -> str:
    """POD NODE MESSAGE; NOMINATED and VICTIMS columns appear when some pod preempted, DEVICES when
    some pod has ResourceClaims."""
    outcomes = list(outcomes)
    preempting = any(o.nominated_node or o.victims for o in outcomes)
    devices = any(o.allocations is not None for o in outcomes)
    header = [
        "POD",
        "NODE",
        *(["NOMINATED", "VICTIMS"] if preempting else []),
        *(["DEVICES"] if devices else []),
    ]
    header.append("MESSAGE")
    rows = [header]
    for o in outcomes:
        row = [f"{o.namespace}/{o.name}", o.node or "<none>"]
        if preempting:
            row += [o.nominated_node or "<none>", ",".join(o.victims) or "<none>"]
        if devices:
            row.append(",".join(d for ds in (o.allocations or {}).values() for d in ds) or "<none>")
        rows.append([*row, o.message])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(f"{c:<{w}}" for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip() for r in rows
    )
