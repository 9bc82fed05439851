"""``kopf-scheduler run``: the operator against a cluster (kubeconfig or in-cluster).

Like ``kopf run -m kopf_scheduler.cluster.operator --all-namespaces --peering NAME`` with the
environment variables ``KOPF_SCHEDULER_*``, plus the scheduler's own flags, and a quicker start:
the scheduler's runtime (``runtime.py``: informers, leader election, scheduling) starts on its own
first, and Kopf (the SchedulerProfile watch, ``operator.py``) is imported and started beside it only
once the first cycles are done. A failover's cost is the time to the new leader's first bind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import gc
import json
import logging
import os
import signal
import sys
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from kopf_scheduler.cluster.connection import Credentials
    from kopf_scheduler.cluster.prefetch import Prefetch
    from kopf_scheduler.cluster.runtime import Options

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


def _go_bool(text: str) -> bool:
    """A pflag bool value (``--leader-elect=false``): Go's strconv.ParseBool."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise argparse.ArgumentTypeError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # kube-scheduler's flags, same names and meaning (cluster/runconfig.py: how they combine with
    # --config). Defaults of None: a flag counts only when given, as pflag's Changed().
    parser.add_argument(
        "--config",
        help="a kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration file; with it, only the "
        "--leader-elect* flags override what it says (as kube-scheduler)",
    )
    parser.add_argument(
        "--write-config-to", help="write the configuration in force (defaulted) to this file and exit"
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig (default: $KOPF_SCHEDULER_KUBECONFIG, in-cluster, $KUBECONFIG, ~/.kube/config); "
        "ignored with --config, which names it in clientConnection.kubeconfig (as kube-scheduler)",
    )
    parser.add_argument("--context", help="kubeconfig context (default: current-context)")
    parser.add_argument(
        "--kube-api-qps",
        type=float,
        default=None,
        help="client-side requests per second to kube-apiserver (token bucket; without --config and "
        "without this flag: no client-side limit; with --config: clientConnection.qps, default 50)",
    )
    parser.add_argument(
        "--kube-api-burst",
        type=int,
        default=None,
        help="client-side burst (clientConnection.burst, default 100 with --config)",
    )
    parser.add_argument(
        "--kube-api-content-type",
        default=None,
        help="accepted for compatibility: kopf-scheduler talks JSON only",
    )
    parser.add_argument(
        "--feature-gates",
        action="append",
        default=[],
        help="kube-scheduler v1.37.2's feature gates, e.g. GenericWorkload=true (repeatable)",
    )
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
        help="ClusterKopfPeering object used for leader election (--leader-elect-resource-name)",
    )
    parser.add_argument("--standalone", action="store_true", help="no leader election (one replica only)")
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority (default: from the start time; older lead)",
    )
    # kube-scheduler's --leader-elect-* flags and defaults (cluster/leader.py: how they are used).
    parser.add_argument(
        "--leader-elect",
        type=_go_bool,
        nargs="?",
        const=True,
        default=None,
        help="elect a leader among the replicas (default true; --leader-elect=false: standalone)",
    )
    parser.add_argument(
        "--leader-elect-lease-duration",
        "--peering-lifetime",
        dest="peering_lifetime",
        type=_seconds,
        default=None,
        help="seconds a standby waits after the leader's last renewal it saw before taking over (15s)",
    )
    parser.add_argument(
        "--leader-elect-renew-deadline",
        dest="renew_deadline",
        type=_seconds,
        default=None,
        help="seconds the leader acts on its last successful renewal before it stops (10s)",
    )
    parser.add_argument(
        "--leader-elect-retry-period",
        dest="retry_period",
        type=_seconds,
        default=None,
        help="seconds between renewals and between a standby's tries (2s)",
    )
    parser.add_argument(
        "--leader-elect-resource-name",
        default=None,
        help="the peering object's name (the same as --peering)",
    )
    parser.add_argument(
        "--leader-elect-resource-namespace",
        default=None,
        help="accepted for compatibility: the peering object is cluster-scoped",
    )
    parser.add_argument(
        "--leader-elect-resource-lock",
        default=None,
        help='accepted for compatibility; must be "leases", as kube-scheduler requires',
    )
    _add_serving_arguments(parser)
    port = int(os.environ.get("KOPF_SCHEDULER_METRICS_PORT", 0))
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=port,
        help="plain-HTTP port of /metrics, /healthz, /livez and /readyz, unauthenticated "
        "(default: off, $KOPF_SCHEDULER_METRICS_PORT; the secure port serves them all)",
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
        help="the same as --feature-gates=OpportunisticBatching=false",
    )
    parser.add_argument(
        "--logging-format",
        choices=("text", "json"),
        default="text",
        help="log lines as text or as JSON objects (component-base's json format)",
    )
    parser.add_argument(
        "-v",
        "--v",
        dest="verbosity",
        type=int,
        nargs="?",
        const=1,
        default=0,
        help="log verbosity (klog's -v): 1-3 adds Kopf's info lines, 4 and more debug lines",
    )
    parser.add_argument("--verbose", action="store_true", help="debug lines (as -v=4)")
    parser.add_argument("--debug", action="store_true", help="Kopf's debug mode")


# serving.DEFAULT_SECURE_PORT and serving.DEFAULT_ALWAYS_ALLOW_PATHS, spelled here: --help need not
# import serving.py (prometheus_client, the HTTPS server).
DEFAULT_SECURE_PORT = 10259
DEFAULT_ALWAYS_ALLOW_PATHS = ("/healthz", "/readyz", "/livez")


class _StringSlice(argparse.Action):
    """pflag's StringSlice: comma-separated; the first use replaces the default, later ones add."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None) -> None:
        # argparse keeps values as the namespace's attributes by dest: ours, a marker beside it.
        first = not vars(namespace).get(f"_{self.dest}_given", False)
        current = [] if first else list(vars(namespace)[self.dest] or [])
        setattr(namespace, f"_{self.dest}_given", True)
        current += next(csv.reader([values])) if values else []
        setattr(namespace, self.dest, current)


def _add_serving_arguments(parser: argparse.ArgumentParser) -> None:
    """kube-scheduler's secure serving, authentication and authorization flags (cluster/serving.py)."""
    # Also from the environment: the test suite turns it off for the processes it starts (many
    # replicas on one machine), as it gives each its own --metrics-port.
    secure = int(os.environ.get("KOPF_SCHEDULER_SECURE_PORT", DEFAULT_SECURE_PORT))
    parser.add_argument(
        "--secure-port",
        type=int,
        default=secure,
        help="the port on which to serve HTTPS with authentication and authorization "
        f"(default {DEFAULT_SECURE_PORT}); if 0, don't serve HTTPS at all",
    )
    parser.add_argument(
        "--bind-address",
        default="0.0.0.0",
        help="the IP address on which to listen for the --secure-port port (0.0.0.0 or :: : all "
        "interfaces and address families)",
    )
    parser.add_argument(
        "--cert-dir",
        default="",
        help="where the self-signed certificate is kept (kube-scheduler.crt/.key) when --tls-cert-file "
        "and --tls-private-key-file are not given (default: generated in memory at each start)",
    )
    parser.add_argument("--tls-cert-file", default="", help="the x509 certificate for HTTPS (CA after it)")
    parser.add_argument("--tls-private-key-file", default="", help="the private key of --tls-cert-file")
    parser.add_argument("--tls-min-version", default="", help="VersionTLS12 (the default) or VersionTLS13")
    parser.add_argument(
        "--authentication-kubeconfig",
        default="",
        help="kubeconfig with rights to create tokenreviews (default: in-cluster; outside a cluster "
        "without it, every request is anonymous)",
    )
    parser.add_argument(
        "--authorization-kubeconfig",
        default="",
        help="kubeconfig with rights to create subjectaccessreviews (default: in-cluster; outside a "
        "cluster without it, all but the always-allowed paths are forbidden)",
    )
    parser.add_argument(
        "--authorization-always-allow-paths",
        action=_StringSlice,
        default=list(DEFAULT_ALWAYS_ALLOW_PATHS),
        help="paths authorized without asking the apiserver (default /healthz,/readyz,/livez)",
    )
    parser.add_argument(
        "--authentication-token-webhook-cache-ttl",
        type=_seconds,
        default=10.0,
        help="how long TokenReview answers are cached (10s)",
    )
    parser.add_argument(
        "--authorization-webhook-cache-authorized-ttl",
        type=_seconds,
        default=10.0,
        help="how long allowing SubjectAccessReview answers are cached (10s)",
    )
    parser.add_argument(
        "--authorization-webhook-cache-unauthorized-ttl",
        type=_seconds,
        default=10.0,
        help="how long denying SubjectAccessReview answers are cached (10s)",
    )
    parser.add_argument(
        "--client-ca-file",
        default="",
        help="CA bundle for client certificates (default: the cluster's, from ConfigMap "
        "kube-system/extension-apiserver-authentication)",
    )
    parser.add_argument(
        "--authentication-skip-lookup",
        type=_go_bool,
        nargs="?",
        const=True,
        default=False,
        help="do not read the client CA from the cluster",
    )
    parser.add_argument(
        "--authentication-tolerate-lookup-failure",
        type=_go_bool,
        nargs="?",
        const=True,
        default=True,
        help="accepted for compatibility: a failed lookup is always tolerated (logged)",
    )


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


def collect_from_now() -> None:
    """Let the cyclic collector run again (``run`` turned it off), over what is allocated from now.

    What start-up allocated (modules, classes, the engine, the initial cache) is moved to the
    permanent generation: alive for the process's life, it is never walked by a full collection
    again (``gc.freeze``); the young generations then run at ``tune_gc``'s threshold.
    """
    gc.freeze()
    gc.enable()


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


class JsonFormatter(logging.Formatter):
    """component-base's JSON log format (``--logging-format=json``): one object a line, with
    ``ts`` (seconds), ``caller``, ``msg`` and ``v``; an error's text under ``err``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 6),
            "caller": f"{record.module}.py:{record.lineno}",
            "msg": record.getMessage(),
        }
        if record.levelno >= logging.ERROR:
            if record.exc_info:
                entry["err"] = self.formatException(record.exc_info)
        else:
            entry["v"] = 0 if record.levelno >= logging.INFO else 4
        entry["logger"] = record.name
        return json.dumps(entry, ensure_ascii=False)


# Kopf's full text format (kopf.configure's, which needs Kopf imported: it is not, yet, at start-up).
TEXT_FORMAT = "[%(asctime)s] %(name)-20.20s [%(levelname)-8.8s] %(message)s"


def configure_logging(args: argparse.Namespace) -> None:
    """klog's -v and --logging-format onto Kopf's and our loggers, as ``kopf.configure`` sets them."""
    level = int(args.verbosity or 0)  # args from add_arguments' parser: every flag has a default
    # -v 1-3: Kopf's info lines too; -v 4 and more (or --verbose): debug; --debug: Kopf's debug mode.
    debug = bool(args.debug)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if level >= 4 or args.verbose or debug else logging.INFO)
    asyncio_logger = logging.getLogger("asyncio")  # its low-level lines only in the debug mode
    asyncio_logger.propagate = debug
    if not debug:
        asyncio_logger.handlers[:] = [logging.NullHandler()]
    if level == 0 and not (args.verbose or args.debug):
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("kopf_scheduler").setLevel(logging.INFO)
    if args.logging_format == "json":
        formatter = JsonFormatter()
        for each in logging.getLogger().handlers:
            each.setFormatter(formatter)


def run(args: argparse.Namespace) -> int:
    # No cyclic collection until the first cycles are done (``operate`` freezes and enables it):
    # everything allocated until then (modules, classes, the engine, the listed cluster) lives on,
    # yet the collector walked it over and over as it grew: ~30 ms of the ~0.3 s of imports alone.
    gc.disable()
    try:
        return _run(args)
    finally:
        gc.enable()  # an early return (a bad flag, --write-config-to) in a caller's process


def _run(args: argparse.Namespace) -> int:
    from kopf_scheduler.cluster.runconfig import RunConfigError, resolve
    from kopf_scheduler.config import features

    try:
        resolved = resolve(args)
    except RunConfigError as exc:  # the reference's words, as it prints them, and exit 1
        print(f"kopf-scheduler: {exc}", file=sys.stderr)
        return 1
    if args.write_config_to:
        import yaml

        from kopf_scheduler.config.kubescheduler import written_document

        with features.using(resolved.gates):
            document = written_document(resolved.config)
        Path(args.write_config_to).write_text(yaml.safe_dump(document, sort_keys=True))
        print(f"kopf-scheduler: wrote the configuration to {args.write_config_to}", file=sys.stderr)
        return 0
    features.set_current(resolved.gates)  # the process's gates, as the reference's DefaultFeatureGate

    from kopf_scheduler.cluster.connection import LoginError, load_credentials
    from kopf_scheduler.cluster.leader import ElectionTiming, start_priority
    from kopf_scheduler.cluster.runtime import Options

    opts = resolved.options
    try:
        ElectionTiming(opts["peering_lifetime"], opts["renew_deadline"], opts["retry_period"])
    except ValueError as exc:
        print(f"kopf-scheduler: invalid leader election timing: {exc}", file=sys.stderr)
        return 1
    try:  # before anything starts: a kubeconfig that cannot work is a one-line error, not a traceback
        credentials = load_credentials(resolved.kubeconfig, args.context)
    except LoginError as exc:
        print(f"kopf-scheduler: cannot log in to the cluster: {exc}", file=sys.stderr)
        return 1

    prefetch = None
    if not opts["delay_cache_until_active"]:
        from kopf_scheduler.cluster.prefetch import Prefetch

        # The first listings' requests now: the apiserver serves them while the engine is imported
        # and built (cluster/prefetch.py), the informers take the answers.
        prefetch = Prefetch.start(credentials)

    from kopf_scheduler.cluster import serving

    try:  # before anything starts, as the reference: a port in use or a bad certificate stops here
        secure = serving.prepare(
            serving.ServingOptions(
                bind_address=args.bind_address,
                port=args.secure_port,
                cert_dir=args.cert_dir,
                cert_file=args.tls_cert_file,
                key_file=args.tls_private_key_file,
                min_tls_version=args.tls_min_version,
            ),
            serving.AuthOptions(
                authentication_kubeconfig=args.authentication_kubeconfig,
                authorization_kubeconfig=args.authorization_kubeconfig,
                token_cache_ttl=args.authentication_token_webhook_cache_ttl,
                allow_cache_ttl=args.authorization_webhook_cache_authorized_ttl,
                deny_cache_ttl=args.authorization_webhook_cache_unauthorized_ttl,
                always_allow_paths=tuple(args.authorization_always_allow_paths),
                client_ca_file=args.client_ca_file,
                skip_lookup=args.authentication_skip_lookup,
            ),
        )
    except serving.ServingError as exc:
        print(f"kopf-scheduler: {exc}", file=sys.stderr)
        return 1
    configz = serving.configz_document(
        resolved.config.document, leader_elect=not opts["standalone"], resource_name=opts["peering"]
    )

    options = Options(
        kubeconfig=resolved.kubeconfig,
        context=args.context,
        priority=args.priority if args.priority is not None else start_priority(),
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port or None,
        max_in_flight=args.max_in_flight,
        parallel_binds=args.parallel_binds,
        event_workers=args.event_workers,
        namespaces=tuple(args.namespace),
        explain_annotation=args.explain_annotation,
        secure_serving=secure,
        configz=configz,
        **opts,
    )
    tune_gc()
    configure_logging(args)
    log = logging.getLogger("kopf_scheduler.run")
    for warning in resolved.warnings:
        log.warning("%s", warning)
    if args.config:
        log.info(
            "Configuration %s: profiles %s%s",
            args.config,
            ", ".join(resolved.config.scheduler_names),
            f", feature gates {options.feature_gates}" if options.feature_gates else "",
        )
    run_loop(operate(options, credentials, prefetch))
    return 0


async def operate(options: Options, credentials: Credentials, prefetch: Prefetch | None = None) -> None:
    """The scheduler's runtime first, then Kopf beside it once the first cycles are done.

    Kopf's import and start-up (~0.1-0.2 s of the one core) would otherwise come before the first
    bind; the SchedulerProfiles are listed by the runtime itself before its first cycle, and Kopf's
    watch starts with a listing of its own, so nothing changed meanwhile is missed. A SIGTERM before
    Kopf is up stops the runtime here (drain, then give the lead up); after, Kopf's own signal
    handling and cleanup handler stop it, before Kopf cancels what was created since it started.
    """
    from kopf_scheduler.cluster.runtime import SchedulerRuntime

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):  # Kopf installs its own when it starts
        loop.add_signal_handler(signum, stop.set)
    runtime = SchedulerRuntime(options, credentials, prefetch=prefetch)
    try:
        await runtime.start()
        stopping = asyncio.ensure_future(stop.wait())
        under_way = asyncio.ensure_future(runtime.under_way())
        await asyncio.wait({stopping, under_way}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        under_way.cancel()
        collect_from_now()
        if stop.is_set():
            return
        with _without_optional_clients():  # Kopf's import and its default registry both probe for them
            import kopf

            from kopf_scheduler.cluster import operator
        operator.attach(runtime)
        await kopf.operator(clusterwide=True, standalone=True, stop_flag=stop)
    finally:
        await runtime.stop()  # once only: after Kopf's cleanup handler, this does nothing
