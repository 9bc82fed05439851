"""The engine's one front door (the reference's ``scheduler.New``): cache, queue with its
nominator, profiles, scheduler and event handlers, wired the same way for every caller.

The live runtime (``cluster/runtime.py``), ``simulate``, ``explain`` and the engine benchmarks all
build their engine here; they differ only in the client they pass (the apiserver's or
``memory_client``), the profiles, and options. Pure Python: no Kubernetes I/O of its own.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kopf_scheduler.api.kinds import Objects
from kopf_scheduler.api.objects import Pod
from kopf_scheduler.cache.cache import Cache
from kopf_scheduler.config import features as feature_gates
from kopf_scheduler.config.profile import SchedulerProfileSpec
from kopf_scheduler.dra.manager import DraManager
from kopf_scheduler.eventhandlers import EventHandlers
from kopf_scheduler.framework.client import ClusterClient
from kopf_scheduler.framework.extender import Extender
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.runtime import FrameworkServices
from kopf_scheduler.framework.snapshot import Snapshot
from kopf_scheduler.metrics.recorder import MetricsRecorder, NoopMetrics
from kopf_scheduler.queue.nominator import Nominator
from kopf_scheduler.queue.scheduling_queue import (
    DEFAULT_POD_INITIAL_BACKOFF,
    DEFAULT_POD_MAX_BACKOFF,
    PriorityQueue,
)
from kopf_scheduler.scheduler.profiles import ProfileSet
from kopf_scheduler.scheduler.schedule_one import EVENT_WORKERS, FitErrorHook, Scheduler

__all__ = ["Engine", "new_engine"]


@dataclass(frozen=True, slots=True)
class Engine:
    """The wired parts; callers feed ``handlers`` and drive ``scheduler``."""

    cache: Cache
    queue: PriorityQueue
    profiles: ProfileSet
    scheduler: Scheduler
    handlers: EventHandlers


def new_engine(
    client: ClusterClient,
    profiles: Iterable[SchedulerProfileSpec] = (),
    *,
    registry: Registry | None = None,
    is_responsible: Callable[[Pod], bool] | None = None,
    objects: Objects | None = None,
    metrics: MetricsRecorder | None = None,
    rng: random.Random | None = None,
    parallel_binds: int = 16,
    event_workers: int = EVENT_WORKERS,
    opportunistic_batching: bool = True,
    extenders: Sequence[Extender] = (),
    with_default: bool = True,
    on_fit_error: FitErrorHook | None = None,
    clock: Callable[[], float] = time.monotonic,
    pod_initial_backoff: float = DEFAULT_POD_INITIAL_BACKOFF,
    pod_max_backoff: float = DEFAULT_POD_MAX_BACKOFF,
) -> Engine:
    """Build an engine around ``client``.

    ``profiles`` are added to the default ``kopf-scheduler`` profile (unless one replaces it);
    ``with_default=False`` serves ``profiles`` alone, as a KubeSchedulerConfiguration does.
    ``is_responsible`` picks the unassigned pods that are ours (default: a profile serves the
    pod's schedulerName). ``objects`` is what plugins read as ``handle.objects`` (default: the
    cache's, filled through the event handlers; simulate passes its inputs' objects).
    ``extenders`` are the HTTP extenders (the edge builds them from a KubeSchedulerConfiguration:
    ``cluster.extender.build_extenders``), fixed for the engine's lifetime as in the reference.
    ``on_fit_error`` is spawned after each FitError's report (``run --explain-annotation``).
    ``clock`` is the queue's and the scheduler's; the backoffs are the queue's (the reference's
    ``WithPodInitialBackoffSeconds``/``WithPodMaxBackoffSeconds``).
    Every part and hook is wired here, at construction: nothing is attached to the parts
    afterwards. The profiles are built with the services the scheduler shares with their plugins,
    so a profile rebuilt later (a SchedulerProfile edit) gets the same ones.
    """
    recorder = metrics if metrics is not None else NoopMetrics()
    cache = Cache()
    queue = PriorityQueue(
        clock=clock,
        initial_backoff=pod_initial_backoff,
        max_backoff=pod_max_backoff,
        nominator=Nominator(),
        metrics=recorder,
        pre_queueing_hints=feature_gates.current().enabled("SchedulerPreQueueingHints"),
    )
    store = objects if objects is not None else cache.objects
    services = FrameworkServices(
        snapshot=Snapshot(),
        objects=store,
        client=client,
        nominator=queue.nominator,
        metrics=recorder,
        pod_groups=cache.pod_groups,
        # DRA's shared state (claims in flight, CEL and pool caches), one per object store.
        dra=DraManager(store),
        opportunistic_batching=opportunistic_batching,
        extenders=tuple(extenders),
    )
    profile_set = ProfileSet(profiles, registry, services=services, queue=queue, with_default=with_default)
    scheduler = Scheduler(
        cache,
        queue,
        profile_set,
        parallel_binds=parallel_binds,
        event_workers=event_workers,
        rng=rng,
        clock=clock,
        on_fit_error=on_fit_error,
    )
    if is_responsible is None:

        def is_responsible(pod: Pod) -> bool:
            return pod.scheduler_name in profile_set

    handlers = EventHandlers(cache, queue, is_responsible, reject_waiting_pod=scheduler.reject_waiting_pod)
    return Engine(cache, queue, profile_set, scheduler, handlers)
