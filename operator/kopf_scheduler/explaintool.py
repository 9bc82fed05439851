"""``kopf-scheduler explain NS/POD``: the command over the live cluster and explain's engine.

A command above both rooms, as ``simulatetool`` is: it lists the live cluster once, read-only, through
the edge (:func:`live_inputs`, :mod:`kopf_scheduler.cluster.listing`) and hands the snapshot to
:mod:`kopf_scheduler.explain` as data, so explain itself never imports the edge. Exit codes: 0
answered, 1 the pod/profile/node was not found or the cluster could not be read, 2 bad input files.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from kopf_scheduler.explain.engine import ExplainError, explain
from kopf_scheduler.explain.render import to_json, to_table
from kopf_scheduler.explain.whatif import overlay
from kopf_scheduler.simulate import (
    Inputs,
    SimulationError,
    add_feature_gates_argument,
    documents_to_inputs,
    load_documents,
    run_under_gates,
)

__all__ = ["add_arguments", "add_explain_view_arguments", "live_inputs", "print_explanation", "run"]


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


def live_inputs(kubeconfig: str | None, context: str | None) -> tuple[Inputs, list[str]]:
    """The live cluster as simulate's inputs, and the listing's notes (profiles left out, and why).

    The edge is imported here, when a cluster is read: its clients (aiohttp, kubernetes, Kopf's
    credentials) stay unloaded for ``simulate FILE`` and ``simulate --explain``, which read files only.
    """
    from kopf_scheduler.cluster.listing import list_cluster

    listing = asyncio.run(list_cluster(kubeconfig, context))
    return documents_to_inputs(listing.documents), listing.notes


def print_explanation(inputs: Inputs, key: str, args: argparse.Namespace, notes: list[str]) -> int:
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
    return run_under_gates(args, _run_live)


def _run_live(args: argparse.Namespace) -> int:
    try:
        extra = load_documents([args.config]) if args.config else None
    except SimulationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        inputs, notes = live_inputs(args.kubeconfig, args.context)
    except SimulationError as exc:
        print(f"error: the cluster holds an object the scheduler cannot read: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # credentials, connection, API errors: say what, not a traceback
        print(f"error: listing the cluster failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if extra is not None:
        inputs = overlay(inputs, extra)
    return print_explanation(inputs, args.pod, args, notes)
