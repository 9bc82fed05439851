"""A lean list+watch informer for the kinds the scheduler caches (pods, nodes, volumes, PDBs, ...).

Why not Kopf's handlers for these: Kopf runs every object through its per-object machinery (a
worker task per object uid, a batching window, handler-selection over causes, a patch evaluation),
which is built for reconciling a few hundred custom resources, not for mirroring 50,000 pods; and
it hides the two facts a scheduler cache depends on: *when the first full listing is complete*
(scheduling must not start on a partial view, or it over-commits nodes whose pods are not listed
yet) and *when a 410 Gone forced a re-list* (deletions that happened during the gap produce no
DELETED event and must be found by diffing the new list against the store). This informer exposes
both: :attr:`Informer.synced` and a diff on every re-list. Kopf keeps what it is good at: the
SchedulerProfile CRs, peering, and probes.

Failures follow client-go's reflector (tools/cache/reflector.go): a watch that ends normally (or
with a broken or dead connection) is started again at once from the last resourceVersion; a
refused connection or a 429 waits for the backoff (:class:`Backoff`) and watches again; any other
failure (a 410, a watch closed within a second with no event, an undecodable line, an error
answer, anything unexpected) waits for the backoff and then lists again, which delivers whatever
the broken watch missed. Nothing ends :meth:`Informer.run` but cancellation: an informer that
stopped would freeze its kind's cache without a word.

Handlers are plain synchronous callables; they run on the loop between reads and must be quick.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kopf_scheduler.api.types import ObjectError
from kopf_scheduler.cluster.apiclient import WATCH_GRACE_SECONDS, ApiClient, Gone
from kopf_scheduler.framework.client import ApiError, TransientError

__all__ = ["MIN_WATCH_TIMEOUT", "Backoff", "Informer", "InformerHandlers", "ResourceKind", "object_key"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def object_key(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _rv(raw: Mapping[str, Any]) -> str:
    return str((raw.get("metadata") or {}).get("resourceVersion") or "")


def _trim(raw: Mapping[str, Any]) -> None:
    """Drop ``metadata.managedFields`` (a third of a pod's JSON), as kube-scheduler's informers do.

    Nothing here reads it, every write is a patch (so nothing sends it back), and the store keeps
    50,000 pods' raw objects.
    """
    meta = raw.get("metadata")
    if type(meta) is dict:
        meta.pop("managedFields", None)


_gc_pauses = 0  # listings in progress (informers list concurrently)
_gc_was_enabled = False


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while listings are decoded and ingested.

    A listing allocates millions of long-lived, acyclic dicts; each collection would walk the ever
    growing heap again (measured: decoding 50,000 pods costs 3.3 s of CPU with the GC on, 0.8 s
    off). Reference counting still frees everything; cycles made meanwhile wait for the next pass.
    """
    global _gc_pauses, _gc_was_enabled
    if _gc_pauses == 0:
        _gc_was_enabled = gc.isenabled()
        gc.disable()
    _gc_pauses += 1
    try:
        yield
    finally:
        _gc_pauses -= 1
        if _gc_pauses == 0 and _gc_was_enabled:
            # What the listings built is the store: long-lived, acyclic, and by far most of the
            # heap. Frozen, the collector never walks it again (a full pass over 50,000 pods'
            # objects is the kind of pause we paused the GC for); it is still freed by reference
            # counting when a pod goes away.
            gc.freeze()
            gc.enable()


# A watch asks the apiserver to close it after a random 25-50 s (client-go's reflector draws from
# [minWatchTimeout, 2*minWatchTimeout) too, with 5 min): the stream's deadline, that plus
# WATCH_GRACE_SECONDS, is how a dead connection is noticed (ApiClient.watch says why), so a dead
# connection costs at most 49 + 10 s of blindness. The price is a watch request per kind every
# ~37 s, served from the apiserver's watch cache; the bookmark it sends 2 s before closing keeps
# the resourceVersion fresh, so the next watch starts where this one stopped.
MIN_WATCH_TIMEOUT = 25.0
# client-go's reflector: a watch that ends this soon with no event is a failure (VeryShortWatchError).
SHORT_WATCH_SECONDS = 1.0


@dataclass(frozen=True)
class Backoff:
    """The delay before listing and watching again after a failure: client-go's reflector defaults
    (``tools/cache/reflector.go``): 0.8 s doubling up to 30 s, each delay plus up to 100% random
    jitter, and back to 0.8 s every 2 minutes (``wait.Backoff.DelayWithReset``). At worst one
    attempt every 30-60 s per kind, where reconnecting at once would be a busy loop."""

    initial: float = 0.8
    cap: float = 30.0
    factor: float = 2.0
    jitter: float = 1.0
    reset: float = 120.0


class _BackoffManager:
    """apimachinery's ``backoffManager.Step`` over ``wait.Backoff.Step``, on the monotonic clock.

    The reset is measured from the previous reset (not from the last failure), as there.
    """

    def __init__(self, policy: Backoff) -> None:
        self.policy = policy
        self._restart()

    def _restart(self) -> None:
        self.duration = self.policy.initial
        self.steps = math.ceil(self.policy.cap / self.policy.initial) if self.policy.initial > 0 else 0
        self.last_reset = time.monotonic()

    def step(self) -> float:
        policy = self.policy
        if time.monotonic() - self.last_reset > policy.reset:
            self._restart()
        current = self.duration
        if self.steps >= 1:
            self.steps -= 1
            self.duration = current * policy.factor
            if self.duration > policy.cap:
                self.duration = policy.cap
                self.steps = 0
        return current + random.random() * policy.jitter * current


class _VeryShortWatch(Exception):
    """The watch ended within a second with no event (client-go's ``VeryShortWatchError``)."""


def _rewatch_only(exc: ApiError) -> bool:
    """client-go's ``isWatchErrorRetriable``: a refused connection or a 429 means the apiserver is
    busy or away, not that our list is stale; watch again from where we were, after the backoff.
    (A refused connection is the only TransientError without an HTTP status: client._connection_error.)"""
    return exc.status == 429 or (isinstance(exc, TransientError) and exc.status == 0)


def _resource_version_unavailable(exc: ApiError) -> bool:
    """client-go's ``isExpiredError || isTooLargeResourceVersionError`` for a list: the version asked
    for is compacted away, or not yet seen by this apiserver's watch cache."""
    return isinstance(exc, Gone) or (exc.status == 504 and "Too large resource version" in str(exc))


@dataclass(frozen=True)
class ResourceKind:
    """What to list and watch: the collection path (all namespaces) and optional selectors."""

    kind: str
    path: str
    params: Mapping[str, str] = field(default_factory=dict)


@dataclass
class InformerHandlers(Generic[T]):
    """Callbacks with parsed objects; ``parse`` raises ObjectError for malformed objects."""

    parse: Callable[[Mapping[str, Any]], T]
    add: Callable[[T], None]
    update: Callable[[T, T], None]
    delete: Callable[[T], None]
    invalid: Callable[[Mapping[str, Any], ObjectError], None] = lambda raw, exc: None


class Informer(Generic[T]):
    """List, then watch from the list's resourceVersion; after a failure, back off and list again
    (with a diff against the store)."""

    def __init__(
        self,
        api: ApiClient,
        resource: ResourceKind,
        handlers: InformerHandlers[T],
        *,
        page_size: int = 5000,
        min_watch_timeout: float = MIN_WATCH_TIMEOUT,
        watch_grace: float = WATCH_GRACE_SECONDS,
        backoff: Backoff = Backoff(),
        watch_after: asyncio.Event | None = None,
    ) -> None:
        """``watch_after``: the first watch waits for it after the first listing (the runtime
        keeps the watches, and aiohttp's import with them, out of the first scheduling cycle)."""
        self.api = api
        self.watch_after = watch_after
        self.resource = resource
        self.handlers = handlers
        self.page_size = page_size
        self.min_watch_timeout = min_watch_timeout
        self.watch_grace = watch_grace
        self.backoff = backoff
        self.store: dict[str, tuple[str, T]] = {}  # key -> (resourceVersion, parsed)
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.relists = 0  # listings completed after the first
        self.expired = 0  # 410s (the resourceVersion was compacted away)
        self.missed_deletions = 0  # objects a re-list found gone without their DELETED event
        self.last_sync_seconds = 0.0
        # client-go's isLastSyncResourceVersionUnavailable: the next listing asks for the latest state.
        self._list_latest = False

    @property
    def kind(self) -> str:
        return self.resource.kind

    @property
    def dead_connection_seconds(self) -> float:
        """The longest a dead watch connection can go unnoticed: the longest ``timeoutSeconds``
        asked for plus the grace after it."""
        return 2 * self.min_watch_timeout + self.watch_grace

    def _watch_timeout(self) -> int:
        """A random ``timeoutSeconds`` in [min, 2*min), as client-go's reflector draws it: the
        reconnections of many informers and replicas spread out instead of coming in step."""
        return max(1, int(self.min_watch_timeout * (1 + random.random())))

    def _parse(self, raw: Mapping[str, Any]) -> T | None:
        try:
            return self.handlers.parse(raw)
        except ObjectError as exc:
            error = exc
        except Exception as exc:
            # A parser gap must cost one object, not the informer (and with it the whole cache).
            error = ObjectError("object", f"{type(exc).__name__}: {exc}")
        logger.warning("Ignoring malformed %s %s: %s", self.kind, object_key(raw), error)
        self._safely(self.handlers.invalid, raw, error)
        return None

    def _safely(self, fn: Callable[..., None], *args: Any) -> None:
        # A handler bug must not kill the informer (it would freeze the cache silently).
        try:
            fn(*args)
        except Exception:
            logger.exception("%s handler failed for %s", self.kind, fn)

    def _upsert(self, raw: Mapping[str, Any], key: str | None = None) -> None:
        """``key``: ``object_key(raw)``, when the caller has it already (a listing)."""
        _trim(raw)
        if key is None:
            key = object_key(raw)
        parsed = self._parse(raw)
        store = self.store
        old = store.get(key)
        if parsed is None:  # became malformed: forget it rather than keep a stale view
            if old is not None:
                del store[key]
                self._safely(self.handlers.delete, old[1])
            return
        store[key] = (_rv(raw), parsed)
        # ``_safely`` inline: a listing adds every object through here.
        try:
            if old is None:
                self.handlers.add(parsed)
            else:
                self.handlers.update(old[1], parsed)
        except Exception:
            logger.exception(
                "%s handler failed for %s",
                self.kind,
                self.handlers.add if old is None else self.handlers.update,
            )

    def _remove(self, raw: Mapping[str, Any]) -> None:
        old = self.store.pop(object_key(raw), None)
        if old is not None:
            self._safely(self.handlers.delete, old[1])

    def _list_params(self) -> dict[str, str]:
        """The first listing a consistent read (no version), a re-list at least as new as what we
        have seen (the cache serves it without a read from etcd), the latest (a quorum read) when
        that version is unavailable: client-go's ``relistResourceVersion`` but for the first.

        client-go lists first at ``0``, for any version the watch cache has; but the watch cache
        ignores ``limit`` at ``0``, so 50,000 pods came as one 88 MB page whose decoding (the
        document, orjson's parse of it and every item at once) was the scheduler's peak memory:
        +650 MB, where pages of 5,000 take +60 MB (docs/benchmarks.md, issue 30). A consistent read
        is paginated, and since v1.31 (ConsistentListFromCache) served from the watch cache too.
        (The reference itself streams its first state as watch events, WatchListClient.)"""
        params = dict(self.resource.params)
        version = "" if not self.synced.is_set() or self._list_latest else self.resource_version
        if version:
            params.update(resourceVersion=version, resourceVersionMatch="NotOlderThan")
        return params

    async def list(self) -> None:
        """Full listing; on a re-list, deliver the diff against the store (deletions included).

        Pages are fetched one ahead while the current one is parsed, so the apiserver's time to
        serve a page overlaps ours to parse the previous one. The version asked for is
        :meth:`_list_params`'s; when the apiserver no longer (or not yet) has it, the listing is
        made again at once for the latest state, as client-go does. The cyclic GC is paused
        meanwhile.
        """
        start = time.monotonic()
        relist = self.synced.is_set()
        params = self._list_params()
        try:
            seen, rv = await self._list_pages(params)
        except ApiError as exc:
            if "resourceVersion" not in params or not _resource_version_unavailable(exc):
                raise
            logger.info("%s listing at %s failed (%s); listing the latest", self.kind, params, exc)
            self._list_latest = True
            seen, rv = await self._list_pages(self._list_params())
        self._list_latest = False
        gone = [k for k in self.store if k not in seen]
        for key in gone:
            _, old = self.store.pop(key)
            self._safely(self.handlers.delete, old)
        self.resource_version = rv
        self.last_sync_seconds = time.monotonic() - start
        if relist:
            self.relists += 1
            self.missed_deletions += len(gone)
        logger.info(
            "%s %d %s objects in %.2fs%s",
            "Re-listed" if relist else "Listed",
            len(self.store),
            self.kind,
            self.last_sync_seconds,
            f" ({len(gone)} gone meanwhile)" if gone else "",
        )
        self.synced.set()

    async def _list_pages(self, params: Mapping[str, str]) -> tuple[set[str], str]:
        """Every page ingested (upserts only); the keys seen and the listing's resourceVersion.

        Page by page rather than ``ApiClient.list_all``: each page is ingested (parsed, upserted)
        while the next one is fetched (one page ahead), so parsing a 50,000-pod listing overlaps
        its transfer instead of waiting for the last page.
        """
        pages: asyncio.Queue[tuple[list[dict[str, Any]], str] | BaseException | None] = asyncio.Queue(
            maxsize=1
        )

        async def fetch() -> None:
            path = self.resource.path
            try:
                async for page in self.api.list_pages(path, params, self.page_size):
                    await pages.put(page)
                await pages.put(None)
            except Exception as exc:  # handed to the consumer, which raises it
                await pages.put(exc)

        fetcher = asyncio.ensure_future(fetch())
        seen: set[str] = set()
        rv = ""
        try:
            with _gc_paused():
                store, upsert = self.store, self._upsert
                while (page := await pages.get()) is not None:
                    if isinstance(page, BaseException):
                        raise page
                    items, rv = page
                    for n, raw in enumerate(items):
                        if type(raw) is not dict:
                            logger.warning("Ignoring a %s list item that is not an object", self.kind)
                            continue
                        key = object_key(raw)
                        seen.add(key)
                        prior = store.get(key)
                        if prior is None or prior[0] != _rv(raw):
                            upsert(raw, key)
                        if n % 1000 == 999:
                            await asyncio.sleep(0)  # binds and watch handlers run between chunks
        finally:
            fetcher.cancel()
        return seen, rv

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, Mapping):
            logger.warning("Ignoring a %s %s event without an object", self.kind, kind)
            return
        rv = _rv(obj)
        if kind == "BOOKMARK":
            pass
        elif kind in ("ADDED", "MODIFIED"):
            self._upsert(obj)
        elif kind == "DELETED":
            self._remove(obj)
        else:
            logger.warning("Ignoring an unknown %s watch event %r", self.kind, kind)
        if rv:
            self.resource_version = rv

    async def run(self) -> None:
        """Forever, as client-go's ``Reflector.Run``: list, watch, and after any failure wait for
        the backoff and list again. Only cancellation ends it."""
        backoff = _BackoffManager(self.backoff)
        while True:
            try:
                await self.list()
                if self.watch_after is not None:
                    await self.watch_after.wait()  # from the listing's version: nothing is missed
                await self._watch(backoff)
            except Exception as exc:
                delay = backoff.step()
                self._report(exc, delay)
                await asyncio.sleep(delay)

    async def _watch(self, backoff: _BackoffManager) -> None:
        """Watch from the last resourceVersion, again and again while the watches end normally
        (client-go's ``Reflector.watch``); raises when the informer must list again."""
        path, params = self.resource.path, self.resource.params
        while True:
            started = time.monotonic()
            events = 0
            stream = self.api.watch(
                path, self.resource_version, params, self._watch_timeout(), grace=self.watch_grace
            )
            try:
                async with contextlib.aclosing(stream):
                    async for event in stream:
                        self._apply(event)
                        events += 1
                        if events % 500 == 0:
                            await asyncio.sleep(0)
            except ApiError as exc:
                if not _rewatch_only(exc):
                    raise
                delay = backoff.step()
                logger.info("%s watch failed: %s; watching again in %.1fs", self.kind, exc, delay)
                await asyncio.sleep(delay)
                continue
            if events == 0 and time.monotonic() - started < SHORT_WATCH_SECONDS:
                raise _VeryShortWatch(f"the {self.kind} watch ended at once with no event")

    def _report(self, exc: Exception, delay: float) -> None:
        if isinstance(exc, Gone):
            self.expired += 1
            logger.info("%s watch expired (%s); re-listing in %.1fs", self.kind, exc, delay)
        elif isinstance(exc, ApiError | _VeryShortWatch):
            logger.warning("%s list/watch failed: %s; re-listing in %.1fs", self.kind, exc, delay)
        else:
            logger.exception("%s list/watch failed unexpectedly; re-listing in %.1fs", self.kind, delay)
