"""Kopf for the SchedulerProfile watch (and ``kopf run``'s login and probes) beside the runtime.

``kopf-scheduler run`` starts the scheduler's runtime (``runtime.py``) on its own first and Kopf
beside it once the first cycle is under way, handing it the running runtime (``attach``); ``kopf run
-m kopf_scheduler.cluster.operator`` (the development loop) has the startup handler build it. Kopf is
configured to write nothing to pods and nodes (it never sees them: see ``informer.py`` for why they
are not Kopf handlers) and nothing to SchedulerProfiles but their status: only ``on.event`` handlers
(no finalizers, no progress or last-handled-configuration annotations) and no Kopf event posting.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

import kopf

from kopf_scheduler.cluster.connection import Credentials, LoginError, load_credentials
from kopf_scheduler.cluster.crd import GROUP, PLURAL, VERSION
from kopf_scheduler.cluster.leader import start_priority
from kopf_scheduler.cluster.runtime import Options, SchedulerRuntime, process_age

__all__ = ["attach"]

logger = logging.getLogger(__name__)

_OPTIONS = Options()
_RUNTIME: SchedulerRuntime | None = None
_CREDENTIALS: Credentials | None = None


def attach(runtime: SchedulerRuntime) -> None:
    """Serve Kopf's handlers from a runtime already running (``run.py``).

    Kopf's cleanup handler still stops it (drains, then gives the lead up): that must happen before
    Kopf cancels the tasks created since it started, binding cycles among them.
    """
    global _RUNTIME
    _RUNTIME = runtime


def _credentials(opts: Options) -> Credentials:
    """One Credentials for Kopf's logins and our client: an exec plugin runs once per expiry, not twice."""
    global _CREDENTIALS
    if _CREDENTIALS is None:
        _CREDENTIALS = load_credentials(opts.kubeconfig, opts.context)
    return _CREDENTIALS


def _env_options() -> Options:
    opts = _OPTIONS
    if os.environ.get("KOPF_SCHEDULER_KUBECONFIG") and not opts.kubeconfig:
        opts.kubeconfig = os.environ["KOPF_SCHEDULER_KUBECONFIG"]
    if os.environ.get("KOPF_SCHEDULER_METRICS_PORT"):
        port = int(os.environ["KOPF_SCHEDULER_METRICS_PORT"])
        opts.metrics_port = port if port > 0 else None
    return opts


class _EndlessBackoffs:
    """Kopf's backoffs, then every 10 s for ever (each request iterates it afresh)."""

    def __iter__(self) -> Iterator[float]:
        yield from (1, 1, 2, 3, 5, 8)
        yield from itertools.repeat(10.0)


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    """Kopf calls this at start, when ``expiration`` passes, and after a 401: all reload it."""
    creds = _RUNTIME.credentials if _RUNTIME is not None else _credentials(_env_options())
    try:
        info = creds.connection_info()
    except LoginError as exc:
        raise kopf.LoginError(str(exc)) from exc
    # Field by field, shallow: asdict() would deep-copy the expiry's tzinfo (not always copyable).
    return kopf.ConnectionInfo(**{f.name: getattr(info, f.name) for f in dataclasses.fields(info)})


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    global _RUNTIME
    # Leader election is ours (cluster/leader.py says why Kopf's peering loop is not used for it):
    # Kopf itself runs standalone, so a standby keeps its SchedulerProfiles current too (only the
    # leader writes their status).
    peering = settings.peering
    peering_name, standalone, priority = peering.name, peering.standalone, peering.priority
    settings.peering.standalone = True
    settings.peering.mandatory = False
    # Kopf's API calls (the SchedulerProfile watch) retry for as long as the apiserver is away: its
    # default backoffs give up after ~54 s, and a failed watcher ends the operator.
    settings.networking.error_backoffs = _EndlessBackoffs()
    settings.posting.enabled = False
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 30
    settings.execution.max_workers = 4
    since = process_age()
    if since is not None:
        logger.info("Kopf started the operator %.2fs after the process started", since)
    if _RUNTIME is not None:
        return  # ``kopf-scheduler run`` started it before Kopf
    # ``kopf run``: Kopf's CLI options name the peering (``kopf run --peering``).
    opts = _env_options()
    if peering_name != "default" or opts.peering == "default":
        opts.peering = peering_name
    opts.standalone = opts.standalone or standalone
    if opts.priority is None:
        opts.priority = priority or start_priority()
    runtime = SchedulerRuntime(opts, _credentials(opts))
    await runtime.start()
    _RUNTIME = runtime


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    global _RUNTIME
    if _RUNTIME is not None:
        await _RUNTIME.stop()
        _RUNTIME = None


@kopf.on.event(GROUP, VERSION, PLURAL)
async def profile_event(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
    """Event handler only: no finalizer and no annotations on SchedulerProfiles; status via /status."""
    if _RUNTIME is None:
        return
    raw = event.get("object") or {}  # the raw dict: kopf.Body's nested views are read-only wrappers
    if event.get("type") == "DELETED":
        _RUNTIME.controller.delete(raw)
    else:
        await _RUNTIME.controller.apply(raw)


@kopf.on.probe(id="scheduler")
def probe(**_: Any) -> Mapping[str, Any]:
    if _RUNTIME is None:
        raise RuntimeError("not started")
    live, why = _RUNTIME.health.live()
    if not live:
        raise RuntimeError(why)
    return _RUNTIME.stats()
