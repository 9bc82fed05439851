"""``kopf-scheduler simulate``: the command over simulate's engine and explain's views.

A module of its own so the dependency runs one way: ``explain`` builds on ``simulate``'s engine
(``Inputs``, ``restrict_profiles``, ``simulate``), and only this command, above both, offers
``--explain`` and ``--from-cluster`` on ``simulate`` (the import contracts pin the order).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable

from kopf_scheduler.config import features
from kopf_scheduler.explain import command
from kopf_scheduler.explain.command import add_explain_view_arguments
from kopf_scheduler.simulate import (
    PodOutcome,
    SimulationError,
    add_feature_gates_argument,
    dataclass_dict,
    feature_gates,
    load_documents,
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
    """``--explain`` and ``--from-cluster`` (see kopf_scheduler.explain.command)."""
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
    try:
        gates = feature_gates(args)
    except features.FeatureGateError as exc:
        print(f"error: --feature-gates: {exc}", file=sys.stderr)
        return 2
    with features.using(gates):  # profiles are defaulted and plugins built under them
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    if getattr(args, "from_cluster", False) or getattr(args, "explain", None):
        if args.from_cluster:
            return command.run_from_cluster(args)
        if not args.files:
            print("error: FILE required (or --from-cluster)", file=sys.stderr)
            return 2
        return command.run_simulate_explain(args)
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
