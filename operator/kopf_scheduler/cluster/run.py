"""``kopf-scheduler run``: the operator against a cluster (kubeconfig or in-cluster).

Equivalent to ``kopf run -m kopf_scheduler.cluster.operator --all-namespaces --peering NAME``
with the environment variables ``KOPF_SCHEDULER_*``; this command adds the scheduler's own flags.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import sys
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["add_arguments", "run", "run_loop"]

T = TypeVar("T")


def _seconds(text: str) -> float:
    """A duration as kube-scheduler's flags take it (``15s``, ``1m30s``, ``500ms``) or plain seconds."""
    import re

    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    try:
        return float(text)
    except ValueError:
        pass
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        default=os.environ.get("KOPF_SCHEDULER_KUBECONFIG"),
        help="kubeconfig (default: in-cluster, $KUBECONFIG, ~/.kube/config)",
    )
    parser.add_argument("--context", help="kubeconfig context (default: current-context)")
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="schedule only pods of these namespaces (repeatable; pods of all namespaces "
        "still count on their nodes). Default: all namespaces",
    )
    parser.add_argument(
        "--peering",
        default=os.environ.get("KOPF_SCHEDULER_PEERING", "kopf-scheduler"),
        help="ClusterKopfPeering object used for leader election",
    )
    parser.add_argument("--standalone", action="store_true", help="no leader election (one replica only)")
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority (default: from the start time; older lead)",
    )
    # kube-scheduler's --leader-elect-* durations and defaults (cluster/leader.py: how they are used).
    parser.add_argument(
        "--leader-elect-lease-duration",
        "--peering-lifetime",
        dest="peering_lifetime",
        type=_seconds,
        default=15.0,
        help="seconds a standby waits after the leader's last renewal it saw before taking over (15s)",
    )
    parser.add_argument(
        "--leader-elect-renew-deadline",
        dest="renew_deadline",
        type=_seconds,
        default=10.0,
        help="seconds the leader acts on its last successful renewal before it stops (10s)",
    )
    parser.add_argument(
        "--leader-elect-retry-period",
        dest="retry_period",
        type=_seconds,
        default=2.0,
        help="seconds between renewals and between a standby's tries (2s)",
    )
    port = int(os.environ.get("KOPF_SCHEDULER_METRICS_PORT", 8080))
    parser.add_argument(
        "--metrics-port", type=int, default=port, help="port of /metrics, /healthz and /readyz (0: off)"
    )
    parser.add_argument("--metrics-host", default="0.0.0.0")
    # Also from the environment, like the metrics port: lets a deployment (or a benchmark sweep) tune
    # them without changing the command line.
    in_flight = int(os.environ.get("KOPF_SCHEDULER_MAX_IN_FLIGHT", 64))
    binds = int(os.environ.get("KOPF_SCHEDULER_PARALLEL_BINDS", 32))  # see operator.Options
    parser.add_argument("--max-in-flight", type=int, default=in_flight, help="concurrent API requests")
    parser.add_argument("--parallel-binds", type=int, default=binds, help="concurrent binding cycles")
    events = int(os.environ.get("KOPF_SCHEDULER_EVENT_WORKERS", 32))
    parser.add_argument("--event-workers", type=int, default=events, help="concurrent Scheduled-event POSTs")
    parser.add_argument(
        "--explain-annotation",
        action="store_true",
        help="annotate pods that fail scheduling with a compact per-plugin summary "
        "(kopfscheduler.io/scheduling-result; needs patch on pods)",
    )
    parser.add_argument(
        "--no-opportunistic-batching",
        dest="opportunistic_batching",
        action="store_false",
        help="turn OpportunisticBatching off (the reference's gate of that name; beta, on by default)",
    )
    parser.add_argument("--verbose", "-v", action="store_true")
    parser.add_argument("--debug", action="store_true")


@contextlib.contextmanager
def _without_optional_clients() -> Iterator[None]:
    """Import Kopf without the ``kubernetes`` and ``pykube`` clients it probes for.

    Kopf imports both when installed, to recognise their objects in ``kopf.adopt()`` and the like
    and to offer them as fallback login handlers; the scheduler needs neither there (it has its own
    client and ``on.login``; ``connection.py`` imports only ``kubernetes``' config loaders, later).
    Importing them during Kopf's import was ~0.3 s of a start-up that is also a failover's cost.
    A ``None`` in ``sys.modules`` makes that import raise ImportError, Kopf's documented "not
    installed" path; anything importing them later gets them.
    """
    blocked = [name for name in ("kubernetes", "pykube") if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]


# The cyclic GC's first generation is collected every GEN0_THRESHOLD net allocations (700 by default).
GEN0_THRESHOLD = 10_000


def tune_gc() -> None:
    """Collect the young generation every 10,000 allocations instead of 700.

    Why: a scheduling cycle allocates a few hundred short-lived objects, nearly all freed by reference
    counting before a collection could see them; at 700 the collector ran every few pods and promoted
    what was alive at that instant, so the full collections that followed walked every pod object
    again. Measured in-process (1,000 nodes, 2,800 pods, batched): 250 us a pod with the default,
    199 us at 10,000 (the GC's share fell from ~50 us to ~2 us). Cyclic garbage (rare here: the
    objects are plain trees) waits longer, which costs only memory, bounded by the same count.
    """
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when installed (a dependency; Kopf's own CLI does the same), else asyncio's loop.

    Why: the scheduler's per-pod work at the edge is two HTTPS requests and two watch events, and
    asyncio's pure-Python TLS transport and loop were about a third of our CPU per pod.
    """
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; kept optional for odd platforms
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def run(args: argparse.Namespace) -> int:
    with _without_optional_clients():  # Kopf's import and its default registry both probe for them
        import kopf

        from kopf_scheduler.cluster import operator
        from kopf_scheduler.cluster.leader import start_priority
    from kopf_scheduler.cluster.connection import load_credentials
    from kopf_scheduler.cluster.leader import ElectionTiming

    try:
        ElectionTiming(args.peering_lifetime, args.renew_deadline, args.retry_period)
    except ValueError as exc:
        print(f"kopf-scheduler: invalid leader election timing: {exc}", file=sys.stderr)
        return 1
    try:  # before Kopf starts: a kubeconfig that cannot work is a one-line error, not a traceback
        credentials = load_credentials(args.kubeconfig, args.context)
    except kopf.LoginError as exc:
        print(f"kopf-scheduler: cannot log in to the cluster: {exc}", file=sys.stderr)
        return 1

    options = operator.Options(
        kubeconfig=args.kubeconfig,
        context=args.context,
        peering=args.peering,
        standalone=args.standalone,
        priority=args.priority if args.priority is not None else start_priority(),
        peering_lifetime=args.peering_lifetime,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port or None,
        max_in_flight=args.max_in_flight,
        parallel_binds=args.parallel_binds,
        event_workers=args.event_workers,
        namespaces=tuple(args.namespace),
        explain_annotation=args.explain_annotation,
        opportunistic_batching=args.opportunistic_batching,
    )
    operator.configure(options, credentials)
    tune_gc()
    kopf.configure(verbose=args.verbose, debug=args.debug)
    if not (args.verbose or args.debug):
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("kopf_scheduler").setLevel(logging.INFO)
    run_loop(
        kopf.operator(
            clusterwide=True,
            standalone=args.standalone,
            peering_name=None if args.standalone else args.peering,
            priority=options.priority,
            identity=options.identity,  # type: ignore[arg-type]
        )
    )
    return 0
