"""The scheduler's runtime: informers -> EventHandlers -> Scheduler -> client, leader election, health.

Kopf plays no part in it. ``kopf-scheduler run`` (``run.py``) builds and starts it on its own loop
first, so nothing of Kopf's stands between the process's start and its first bind, and starts Kopf
beside it afterwards for the SchedulerProfile watch (``operator.py``); ``kopf run -m
kopf_scheduler.cluster.operator`` builds it from Kopf's startup handler instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
from collections import OrderedDict
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kopf_scheduler.api import kinds
from kopf_scheduler.api.containers import READ_CONDITIONS
from kopf_scheduler.api.kinds import POD_FIELD_SELECTOR
from kopf_scheduler.api.objects import Node, Pod, parse_node, parse_pod
from kopf_scheduler.api.types import ObjectError
from kopf_scheduler.cluster import metrics
from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.client import KubeClusterClient
from kopf_scheduler.cluster.connection import Credentials, load_credentials
from kopf_scheduler.cluster.crd import GROUP, PLURAL, VERSION
from kopf_scheduler.cluster.informer import Informer, InformerHandlers, ResourceKind
from kopf_scheduler.cluster.leader import ApiPeeringStore, ElectionTiming, LeaderGate, start_priority
from kopf_scheduler.cluster.profiles import ProfileController
from kopf_scheduler.cluster.ratelimit import ClientThrottle, TokenBucket
from kopf_scheduler.cluster.supervise import supervise
from kopf_scheduler.framework.client import ApiError, Conflict, Fenced, NotFound

if TYPE_CHECKING:  # imported when used: neither is on the way to the first bind unless configured
    from kopf_scheduler.cluster.extender import HTTPExtender
    from kopf_scheduler.cluster.prefetch import Prefetch
    from kopf_scheduler.cluster.serving import Endpoints, SecureServing
    from kopf_scheduler.config.profile import SchedulerProfileSpec

__all__ = ["OBJECT_KINDS", "OPTIONAL_KINDS", "PROFILES_PATH", "Options", "SchedulerRuntime", "process_age"]

logger = logging.getLogger(__name__)

PROFILES_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
INVALID_REPORTED_MAX = 4096
# What the informers list and watch, from the registry of kinds (api/kinds.py).
OBJECT_KINDS: tuple[ResourceKind, ...] = tuple(ResourceKind(k.kind, k.path) for k in kinds.OBJECT_KINDS)
# Kinds of APIs a cluster may not serve: informed only when discovery lists them (PodGroups).
# Each is (group/version discovery path, plural, what to inform).
OPTIONAL_KINDS: tuple[tuple[str, str, ResourceKind], ...] = tuple(
    (k.api_path, k.plural, ResourceKind(k.kind, k.path)) for k in kinds.OPTIONAL_KINDS
)


def process_age() -> float | None:
    """Seconds since this process started (Linux ``/proc``), or None where that is not known."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _identity() -> str:
    """The replica's name in the peering object: ``$POD_ID`` (the pod's name, from the Deployment),
    else host, pid and a random suffix. Read, never written back: child processes (tests, tools)
    must not inherit one replica's identity."""
    if os.environ.get("POD_ID"):
        return os.environ["POD_ID"]
    rnd = "".join(random.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=5))
    return f"{socket.gethostname()}-{os.getpid()}-{rnd}"


@dataclass
class Options:
    kubeconfig: str | None = None
    context: str | None = None
    peering: str = "kopf-scheduler"
    standalone: bool = False
    priority: int | None = None
    # kube-scheduler's leaderElection defaults: leaseDuration 15 s, renewDeadline 10 s, retryPeriod 2 s.
    peering_lifetime: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    metrics_host: str = "0.0.0.0"
    metrics_port: int | None = 8080
    max_in_flight: int = 64
    # Measured on SchedulingBasic/1000Nodes. On the quiet 2-core machine (bench, 4 runs, 04:05 UTC):
    # 16 binds in flight gave 111 and 132 pods/s, 32 gave 139 and 164, 64 gave 128. Under heavy
    # contention (load 7-14, backlog mode) 16 had done better (86-143) than 32 (67-94). Past what the
    # apiserver sustains, more concurrent POSTs only add connections (one per request on HTTP/1.1).
    parallel_binds: int = 32
    # Scheduled events in flight. The reference posts each event from a goroutine of its own (no
    # bound); with 4 here, a saturated apiserver (~100 ms a request) let only ~40 events/s through
    # while binds ran at ~170/s, so the queue hit its 1000 cap and events were dropped
    # (SchedulingBasic/1000Nodes, full scale, 2000 pods: 422 posted while binding, ~590 dropped).
    event_workers: int = 32
    stuck_after: float = 30.0
    namespaces: tuple[str, ...] = ()  # schedule only these namespaces' pods (all count on nodes)
    explain_annotation: bool = False  # annotate pods failing scheduling with a per-plugin summary
    opportunistic_batching: bool = True
    identity: str = field(default_factory=_identity)
    # From a KubeSchedulerConfiguration (``run --config``, cluster/runconfig.py) or its flags:
    # clientConnection.qps/burst as client-go's token bucket (None: no client-side limit);
    kube_api_qps: float | None = None
    kube_api_burst: int | None = None
    # the file's profiles, SchedulerProfile resources on top (None: the built-in kopf-scheduler one);
    profiles: tuple[SchedulerProfileSpec, ...] | None = None
    # informers start once this replica leads (standbys keep no cache, and take longer to take over);
    delay_cache_until_active: bool = False
    feature_gates: str = ""  # the --feature-gates in force (config.features.current()), for the log
    extenders: tuple[HTTPExtender, ...] = ()  # the file's HTTP extenders (cluster/extender.py)
    # HTTPS on --secure-port (cluster/serving.py), prepared by ``run`` before Kopf starts; None: off.
    secure_serving: SecureServing | None = None
    configz: Mapping[str, Any] | None = None  # what /configz serves (the configuration in force)


# What the edge still reads of a bound pod's object: /metrics/resources (resource_metrics.py: the
# containers' and the pod's resources, overhead, priority, node, scheduler, phase) and the status
# conditions a preemption compares before it writes DisruptionTarget.
_BOUND_META = ("name", "namespace", "uid", "resourceVersion")
_BOUND_SPEC = ("nodeName", "priority", "schedulerName", "overhead", "resources")
_BOUND_CONTAINER = ("name", "resources", "restartPolicy")


def bound_pod_raw(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A bound pod's object cut to what the edge reads of it (the parts shared, not copied).

    Why: every listed pod kept its whole object beside its parsed form, ~4.9 KB a pod (50,000 bound
    pods: 244 MB traced) for the ~1 KB the parsed Pod takes; a pending pod keeps its object (the
    extenders are sent it, the status writes compare its conditions), and so does every pod when
    an extender is configured (its preemption verb is sent the victims, bound pods, whole).
    """
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    cut_spec = {k: spec[k] for k in _BOUND_SPEC if k in spec}
    for key in ("containers", "initContainers"):
        if spec.get(key):
            cut_spec[key] = [
                {k: c[k] for k in _BOUND_CONTAINER if k in c} if isinstance(c, Mapping) else c
                for c in spec[key]
            ]
    cut_status: dict[str, Any] = {"phase": status["phase"]} if "phase" in status else {}
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        read = [c for c in conditions if isinstance(c, Mapping) and c.get("type") in READ_CONDITIONS]
        if read:
            cut_status["conditions"] = read
    return {
        "metadata": {k: meta[k] for k in _BOUND_META if k in meta},
        "spec": cut_spec,
        "status": cut_status,
    }


def parse_listed_pod(raw: Mapping[str, Any]) -> Pod:
    """``parse_pod``, a bound pod keeping only :func:`bound_pod_raw` of its object."""
    pod = parse_pod(raw)
    if pod.node_name:
        pod.raw = bound_pod_raw(raw)
    return pod


class InstrumentedClient(KubeClusterClient):
    """Counts bind errors where they are observed: at the API."""

    first_bind_at: float | None = None  # time.monotonic() of the first successful bind

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bound = asyncio.Event()  # set at the first successful bind

    async def bind(self, pod: Pod, node_name: str) -> None:
        try:
            await super().bind(pod, node_name)
        except Fenced:
            raise  # nothing was sent: not an error of the API
        except Conflict:
            metrics.BIND_ERRORS.labels("conflict").inc()
            raise
        except NotFound:
            metrics.BIND_ERRORS.labels("not_found").inc()
            raise
        except ApiError:
            metrics.BIND_ERRORS.labels("api").inc()
            raise
        if self.first_bind_at is None:
            self.first_bind_at = time.monotonic()
            self.bound.set()
            since = process_age()
            if since is not None:  # what a failover costs: imports, Kopf, listing, the first cycle
                logger.info("First bind %.2fs after the process started", since)


class SchedulerRuntime:
    """Informers -> EventHandlers -> Scheduler -> client, under our leader election; no Kopf."""

    def __init__(
        self,
        options: Options,
        credentials: Credentials | None = None,
        *,
        client: InstrumentedClient | None = None,
        prefetch: Prefetch | None = None,
    ) -> None:
        """``client`` is the engine's (default: the apiserver's, instrumented and fenced by the
        lead); the offline tests give an in-memory one here, as nothing is swapped in later.
        ``prefetch``: the informers' first pages, asked for before this was built (``run``)."""
        from kopf_scheduler.engine import new_engine

        self.options = options
        self.started = time.monotonic()
        self.credentials = credentials or load_credentials(options.kubeconfig, options.context)
        if options.standalone:
            self.leader = LeaderGate.standalone()
            self.election_api: ApiClient | None = None
        else:
            timing = ElectionTiming(options.peering_lifetime, options.renew_deadline, options.retry_period)
            # A client of its own, as kube-scheduler's leader election has: renewals never queue
            # behind a burst of binds for the in-flight bound, and answer within the renew deadline.
            self.election_api = ApiClient(
                self.credentials,
                max_in_flight=4,
                request_timeout=timing.renew_deadline / 2,
                user_agent="kopf-scheduler/leader-election",
                # A bucket of its own too, as the reference's lock has with its own client.
                rate_limiter=TokenBucket(options.kube_api_qps, options.kube_api_burst or 0)
                if options.kube_api_qps
                else None,
            )
            priority = options.priority if options.priority is not None else start_priority()
            store = ApiPeeringStore(self.election_api, options.peering)
            self.leader = LeaderGate(store, options.identity, priority, timing)
        # A write waiting out a Retry-After is not sent once the lead is lost meanwhile.
        self.api = ApiClient(
            self.credentials,
            max_in_flight=options.max_in_flight,
            write_fence=self.leader.may_act,
            rate_limiter=ClientThrottle(options.kube_api_qps, options.kube_api_burst or 0)
            if options.kube_api_qps
            else None,
        )
        if prefetch is not None:
            self.api.prefetched = prefetch.take()
        # An extender's bind is a write too: the file's extenders, each fenced by the lead.
        self.extenders: tuple[HTTPExtender, ...] = ()
        if options.extenders:
            from kopf_scheduler.cluster.extender import HTTPExtender

            fence = self.leader.may_act
            self.extenders = tuple(HTTPExtender(e.config, fence=fence) for e in options.extenders)
        # Every write of the engine is fenced by the lead: nothing leaves a replica that may not act.
        self.client = (
            client
            if client is not None
            else InstrumentedClient(
                self.api, instance=f"kopf-scheduler-{options.identity}", fence=self.leader.may_act
            )
        )
        on_fit_error = None
        if options.explain_annotation:
            from kopf_scheduler.cluster.explain_annotation import annotator

            on_fit_error = annotator(self.api)
        engine = new_engine(
            self.client,
            options.profiles or (),
            is_responsible=lambda pod: self.is_responsible(pod),
            metrics=metrics.SCHEDULER,
            parallel_binds=options.parallel_binds,
            event_workers=options.event_workers,
            opportunistic_batching=options.opportunistic_batching,
            extenders=self.extenders,
            # A file's profiles are all there is, as in kube-scheduler.
            with_default=options.profiles is None,
            on_fit_error=on_fit_error,
        )
        self.cache = engine.cache
        self.queue = engine.queue
        self.profiles = engine.profiles
        self.scheduler = engine.scheduler
        self.handlers = engine.handlers
        metrics.SCHEDULER.watch_pending_pods(self.queue.pending_pods)
        self.controller = ProfileController(
            self.profiles,
            self.write_profile_status,
            self.profiles_changed,
            base={p.scheduler_name: p for p in options.profiles or ()},
        )
        self.health = metrics.Health(stuck_after=options.stuck_after)
        self.health.checks["tasks"] = self._dead_task
        self._crashed: dict[str, str] = {}  # supervised task -> why it is down until its restart
        self.health.checks["supervised"] = self._crashed_tasks
        metrics.LEADER.set_function(lambda: 1.0 if self.leader.is_leading() else 0.0)
        # The informers watch once the first cycle is through (``_open_watches``): the first watch
        # imports aiohttp (~0.06-0.09 s of the core), which must not stand before the first bind.
        self.watching = asyncio.Event()
        self.pods: Informer[Pod] = Informer(
            self.api,
            ResourceKind("Pod", kinds.by_name("Pod").path, {"fieldSelector": POD_FIELD_SELECTOR}),
            InformerHandlers(
                # An extender's preemption verb is sent the victims whole: all pods keep theirs then.
                parse=parse_pod if options.extenders else parse_listed_pod,
                add=self.handlers.add_pod,
                update=self.handlers.update_pod,
                delete=self.handlers.delete_pod,
                invalid=self._invalid_pod,
            ),
            watch_after=self.watching,
        )
        self.nodes: Informer[Node] = Informer(
            self.api,
            ResourceKind("Node", kinds.by_name("Node").path),
            InformerHandlers(
                parse=parse_node,
                add=self.handlers.add_node,
                update=self.handlers.update_node,
                delete=self.handlers.delete_node,
            ),
            watch_after=self.watching,
        )
        self.object_informers: list[Informer[Mapping[str, Any]]] = [
            Informer(self.api, kind, self._object_handlers(kind.kind), watch_after=self.watching)
            for kind in OBJECT_KINDS
        ]
        self.synced = asyncio.Event()
        self.sync_seconds: float | None = None
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._discovery: asyncio.Future[None] | None = None  # the optional kinds' discovery, once started
        self._informing = False  # the informers were started (not yet, with delayCacheUntilActive)
        # uid -> resourceVersion already reported. Bounded (oldest first out): deleted invalid pods
        # never say goodbye through the informer (it never stored them), so entries cannot be dropped
        # on deletion; a forgotten one costs at most one repeated FailedScheduling event.
        self._invalid_reported: OrderedDict[str, str] = OrderedDict()
        self._server: Any = None
        self._metrics_sock: socket.socket | None = None  # bound at start, served by ``_serve``
        self._stopping = False
        self._stop_task: asyncio.Future[None] | None = None

    # -- wiring --

    def is_responsible(self, pod: Pod) -> bool:
        if self.options.namespaces and pod.namespace not in self.options.namespaces:
            return False
        return pod.scheduler_name in self.profiles

    def _object_handlers(self, kind: str) -> InformerHandlers[Any]:
        # Parsed once here, at the edge, into the kind's typed view (api/kinds.py); a malformed
        # object is logged and skipped by the informer, as a malformed pod is.
        return InformerHandlers(
            parse=kinds.by_name(kind).parse,
            add=lambda raw: self.handlers.add_object(kind, raw),
            update=lambda old, new: self.handlers.update_object(kind, old, new),
            delete=lambda raw: self.handlers.delete_object(kind, raw),
        )

    def _invalid_pod(self, raw: Mapping[str, Any], exc: ObjectError) -> None:
        """A pod we cannot parse but must schedule: say why on the pod (once per resourceVersion)."""
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        if spec.get("nodeName") or (spec.get("schedulerName") or "default-scheduler") not in self.profiles:
            return
        if self.options.namespaces and meta.get("namespace") not in self.options.namespaces:
            return
        uid = str(meta.get("uid") or "")
        rv = str(meta.get("resourceVersion") or "")
        if self._invalid_reported.get(uid) == rv or not self.leader.is_leading():
            return
        self._invalid_reported[uid] = rv
        self._invalid_reported.move_to_end(uid)
        while len(self._invalid_reported) > INVALID_REPORTED_MAX:
            self._invalid_reported.popitem(last=False)
        pod = Pod(
            uid=uid,
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name")),
            scheduler_name=str(spec.get("schedulerName")),
            raw=raw,
        )
        report = self.client.record_failed(pod, "SchedulerError", f"invalid pod: {exc}")
        self._spawn(f"report-invalid-{uid}", report)

    def profiles_changed(self, added: set[str], removed: set[str]) -> None:
        """A new schedulerName adopts its already-listed pending pods; a removed one releases them."""
        for _, pod in list(self.pods.store.values()):
            if pod.node_name or (self.options.namespaces and pod.namespace not in self.options.namespaces):
                continue
            if pod.scheduler_name in added:
                self.handlers.add_pod(pod)
            elif pod.scheduler_name in removed:
                self.queue.delete(pod)

    async def write_profile_status(self, name: str, status: dict[str, Any]) -> None:
        if not self.leader.is_leading():
            return  # the leader owns the status; a standby only keeps its profiles current
        try:
            await self.api.request(
                "PATCH",
                f"{PROFILES_PATH}/{name}/status",
                body={"status": status},
                content_type="application/merge-patch+json",
            )
        except NotFound:
            pass
        except ApiError as exc:
            logger.warning("Failed to write the status of SchedulerProfile %s: %s", name, exc)

    async def resync_profiles(self, attempts: int = 8) -> None:
        """List the SchedulerProfiles before scheduling; retry what a fresh apiserver answers.

        Right after an apiserver (re)start a CRD's storage answers 429 "storage is (re)initializing"
        for a second or so; giving up there would stop the scheduling loop.
        """
        delay = 0.1
        for attempt in range(attempts):
            try:
                items, _ = await self.api.list_all(PROFILES_PATH)
            except NotFound:
                logger.warning(
                    "The SchedulerProfile CRD is not installed; only the built-in default is served"
                )
                return
            except ApiError as exc:
                if attempt == attempts - 1 or not (exc.status in (0, 429) or exc.status >= 500):
                    raise
                logger.info("Listing SchedulerProfiles failed (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            await self.controller.resync(items)
            return

    # -- tasks --

    def _spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks[name] = task
        if name.startswith("report-"):  # fire-and-forget writes: forget them when done
            task.add_done_callback(lambda _: self._tasks.pop(name, None))
        return task

    def _crashed_tasks(self) -> str | None:
        return "; ".join(f"{name} {why}" for name, why in self._crashed.items()) or None

    def _dead_task(self) -> str | None:
        for name, task in self._tasks.items():
            if task.done() and not name.startswith("report-"):
                exc = None if task.cancelled() else task.exception()
                return f"{name} ended: {exc!r}"
        return None

    def informers(self) -> list[Informer[Any]]:
        return [self.nodes, self.pods, *self.object_informers]

    async def discover_optional_kinds(self) -> None:
        """Add informers for the optional APIs the apiserver serves (a 404 means not served)."""
        for group_path, plural, kind in OPTIONAL_KINDS:
            try:
                listing = await self.api.request("GET", group_path)
            except NotFound:
                logger.info("%s is not served: no %s informer", group_path, kind.kind)
                continue
            names = {r.get("name") for r in (listing or {}).get("resources", [])}
            if plural in names:
                informer: Informer[Any] = Informer(
                    self.api, kind, self._object_handlers(kind.kind), watch_after=self.watching
                )
                self.object_informers.append(informer)
                if self._informing:  # the others already list: this one joins them
                    self._spawn(f"informer-{informer.kind}", informer.run())

    async def start(self) -> None:
        # The optional kinds are discovered while the others already list (a round trip less before
        # the first cycle); wait_synced waits for the discovery and for what it added.
        self._discovery = asyncio.ensure_future(self.discover_optional_kinds())
        if self.options.delay_cache_until_active:
            self._spawn("informers", self._start_informers_when_leading())
        else:
            self._start_informers()
        self._spawn("leader", supervise("leader election", self.leader.run, self._crashed))
        self._spawn("scheduling", self._schedule_while_leading())
        self._spawn("watch-gate", self._open_watches())
        self._spawn("heartbeat", self.health.heartbeat())
        if self.options.metrics_port is not None:  # bound now: a port in use fails the start
            self._metrics_sock = metrics.listen(self.options.metrics_host, self.options.metrics_port)
        self._spawn("serve-gate", self._serve())
        since = process_age()
        if since is not None:
            logger.info("The scheduler's runtime started %.2fs after the process started", since)

    def _start_informers(self) -> None:
        self._informing = True
        for informer in self.informers():
            self._spawn(f"informer-{informer.kind}", informer.run())

    async def under_way(
        self, quiet: float = 0.2, grace: float = 1.0, limit: float = 10.0, poll: float = 0.05
    ) -> None:
        """Return once the first cycles are done: the initial listing in, and the scheduling queue
        without an active pod for ``quiet`` seconds after a bind (``grace`` seconds when nothing
        was bound: nothing pending, a standby); at the latest after ``limit`` seconds (a backlog,
        a standby that lists only once it leads).

        ``run`` starts Kopf then: its import and start-up hold the one core for a while (~0.1-0.2 s),
        which must not stand between the process's start and its first bind, nor stall a burst.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.synced.wait(), limit)
        idle_since: float | None = None
        while (now := loop.time()) < deadline:
            if self.queue.pending_pods()["active"]:
                idle_since = None
            else:
                idle_since = now if idle_since is None else idle_since
                if now - idle_since >= (quiet if self.client.bound.is_set() else grace):
                    return
            await asyncio.sleep(poll)

    async def _open_watches(self, limit: float = 1.0) -> None:
        """Let the informers watch once the first cycle is through: at the first bind, at once when
        the listing left nothing to schedule or this replica does not lead, at the latest ``limit``
        seconds after the listing. Not when the queue empties: the pod it gave to its cycle is
        still to be bound, and the first watch's import would hold that bind's answer. Until then
        what changes waits in the apiserver's watch cache: each watch starts from its listing's
        resourceVersion."""
        await self.synced.wait()
        if self.leader.is_leading() and self.queue.pending_pods()["active"]:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.client.bound.wait(), limit)
        self.watching.set()
        self._tasks.pop("watch-gate", None)  # done, not dead: the health check must not see it

    async def _serve(self, limit: float = 1.0) -> None:
        """Start the metrics/health server and the secure port once the first cycles are through
        (when the watches open: at the first bind, or at once when nothing is pending or this
        replica does not lead), at the latest ``limit`` seconds after the start (a long listing, an
        apiserver away). Their imports (``http.server``, prometheus-client's exposition: ~20 ms)
        must not stand before the first bind. Both ports are bound already, so a probe or a scrape
        meanwhile waits in the listen backlog, answered within ``limit``: the kubelet's probes
        tolerate that (kube-scheduler serves from its start, but its first bind comes later)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.watching.wait(), limit)
        if self._metrics_sock is not None:
            host, port = self.options.metrics_host, self.options.metrics_port or 0
            self._server = metrics.serve(self.health, host, port, sock=self._metrics_sock)
            self._metrics_sock = None  # the server's now
        if self.options.secure_serving is not None:
            self.options.secure_serving.start(self.endpoints())
        self._tasks.pop("serve-gate", None)  # done, not dead: the health check must not see it

    def endpoints(self) -> Endpoints:
        """What the secure port reads (from its threads: plain reads, no coroutine)."""
        from kopf_scheduler.cluster.serving import Endpoints

        return Endpoints(
            health=self.health,
            pods=lambda: [pod.raw for _, pod in list(self.pods.store.values())],
            is_leader=self.leader.is_leading,
            configz=self.options.configz,
            leader_election=None if self.options.standalone else self._leader_watchdog,
            synced=self.synced.is_set,
            shutting_down=lambda: self._stopping,
        )

    def _leader_watchdog(self) -> str | None:
        """kube-scheduler's ``leaderElection`` check (``NewLeaderHealthzAdaptor(20 s)``): failing
        while this replica still counts itself leader 20 s past the lease duration without a renewal.
        The renew deadline stands a leader down long before that, unless its loop is wedged."""
        gate = self.leader
        if not gate.leading.is_set() or gate.renewed_at is None:
            return None
        if gate.clock() - gate.renewed_at > self.options.peering_lifetime + 20.0:
            return f"failed election to renew leadership on lease {self.options.peering}"
        return None

    async def _start_informers_when_leading(self) -> None:
        """delayCacheUntilActive: list and watch only once elected (kube-scheduler's option)."""
        await self.leader.leading.wait()
        logger.info("Leading: starting the informers (delayCacheUntilActive)")
        if self._discovery is not None:
            await self._discovery
        self._start_informers()
        self._tasks.pop("informers", None)  # done, not dead: the health check must not see it

    async def wait_synced(self) -> None:
        if self._discovery is not None:
            await self._discovery  # the informers it adds count too
        await asyncio.gather(*(i.synced.wait() for i in self.informers()))
        if not self.synced.is_set():
            self.sync_seconds = time.monotonic() - self.started
            metrics.SYNC_SECONDS.set(self.sync_seconds)
            logger.info(
                "Initial listing complete in %.2fs: %d nodes, %d pods",
                self.sync_seconds,
                len(self.nodes.store),
                len(self.pods.store),
            )
            self.synced.set()
            self.health.ready = True
            self.api.prefetched.clear()  # an early page no informer asked for is not kept

    async def _schedule_while_leading(self) -> None:
        """Schedule only with a complete view and only while elected; hand over cleanly otherwise."""
        # Leading already (standalone, or elected before the listing ended): the first listing of
        # SchedulerProfiles goes beside the informers', its round trip (and handshake) overlapping
        # their parsing instead of following it on the way to the first bind. Like theirs, it is a
        # snapshot of the start; an edit after it comes by Kopf's watch as any later edit does.
        early = asyncio.ensure_future(self.resync_profiles()) if self.leader.is_leading() else None
        try:
            await self.wait_synced()
        except BaseException:
            if early is not None:
                early.cancel()
            raise
        while True:
            await self.leader.leading.wait()
            if self._stopping:
                if early is not None:
                    early.cancel()
                return
            try:
                # what changed while we stood by (or the apiserver was away)
                await (early if early is not None else self.resync_profiles())
            except ApiError as exc:
                logger.warning("Listing SchedulerProfiles failed (%s); scheduling with the ones known", exc)
            finally:
                early = None
            if self._stopping:  # SIGTERM during the listing: Scheduler.run() would clear its stop flag
                return
            run = asyncio.ensure_future(self.scheduler.run())
            lost = asyncio.ensure_future(self.leader.standby.wait())
            await asyncio.wait({run, lost}, return_when=asyncio.FIRST_COMPLETED)
            self.scheduler.stop()
            lost.cancel()
            await run
            # Binds already sent finish (or fail: the fence closed with the lead); the pods they
            # fail go back to the queue for whoever leads next.
            await self.scheduler.wait_for_bindings()
            if self._stopping:
                return
            if not self.leader.standby.is_set():
                raise RuntimeError("the scheduling loop ended while leading")

    async def stop(self, drain_timeout: float = 10.0) -> None:
        """SIGTERM: stop scheduling, drain what is in flight, *then* give the lead up.

        In that order, so the next leader's first bind comes after our last write: releasing first
        (as Kopf's peering did) let both replicas write during every rollout. Called twice under
        ``run`` (Kopf's cleanup handler, then ``operate``): the second waits for the first, which
        a cancelled caller (Kopf cancelling its cleanup) leaves running, or runs it again if it
        was cancelled itself.
        """
        if self._stop_task is None or self._stop_task.cancelled():
            self._stop_task = asyncio.ensure_future(self._stop(drain_timeout))
        await asyncio.shield(self._stop_task)

    async def _stop(self, drain_timeout: float) -> None:
        self._stopping = True
        self.scheduler.stop()
        scheduling = self._tasks.get("scheduling")
        if scheduling is not None and self.leader.leading.is_set():  # a standby has nothing to drain
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(scheduling), drain_timeout)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.scheduler.wait_for_bindings(), drain_timeout)
        leader = self._tasks.pop("leader", None)
        if leader is not None:
            leader.cancel()
            await asyncio.gather(leader, return_exceptions=True)
        await self.leader.release()
        if self._discovery is not None:
            self._discovery.cancel()
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        await self.api.close()
        if self.election_api is not None:
            await self.election_api.close()
        for extender in self.extenders:
            await extender.close()
        metrics.stop(self._server)
        if self._metrics_sock is not None:  # stopped before it was served
            self._metrics_sock.close()
        if self.options.secure_serving is not None:
            self.options.secure_serving.stop()

    @property
    def first_bind_seconds(self) -> float | None:
        at = self.client.first_bind_at
        return None if at is None else at - self.started

    def stats(self) -> dict[str, Any]:
        return {
            "leading": self.leader.is_leading(),
            "synced": self.synced.is_set(),
            "sync_seconds": self.sync_seconds,
            "first_bind_seconds": self.first_bind_seconds,
            "nodes": len(self.nodes.store),
            "pods": len(self.pods.store),
            "pending": self.queue.pending_pods(),
            "profiles": self.profiles.names(),
        }
