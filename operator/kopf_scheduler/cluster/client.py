"""The real :class:`~kopf_scheduler.framework.client.ClusterClient`: raw HTTP to the apiserver on aiohttp.

One shared ``aiohttp.ClientSession`` (keep-alive connections, no per-call setup) and a semaphore
bounding the requests in flight, so a burst of thousands of binds neither opens thousands of sockets
nor trips the apiserver's max-in-flight limit. No call blocks the event loop; JSON payloads are small.
The write semantics follow kube-scheduler: ``pods/binding`` for binds, events.k8s.io/v1 events,
the ``PodScheduled`` condition by strategic-merge patch of ``pods/status`` (merge key ``type``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import errno
import json
import logging
import random
import socket
import time
import urllib.request
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
import orjson

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.podgroup import PodGroup
from kopf_scheduler.cluster.connection import Credentials
from kopf_scheduler.cluster.http11 import ConnectionClosed, Http11Pool, ProtocolError
from kopf_scheduler.cluster.ratelimit import Throttle
from kopf_scheduler.framework.client import ApiError, Conflict, Fenced, NotFound, TransientError
from kopf_scheduler.framework.diagnosis import truncate_message

__all__ = [
    "REPORTING_CONTROLLER",
    "ApiClient",
    "Gone",
    "KubeClusterClient",
]

logger = logging.getLogger(__name__)

REPORTING_CONTROLLER = "kopf-scheduler"
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
BOUND_BY_CONTROLLER_ANNOTATION = "pv.kubernetes.io/bound-by-controller"
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
KEEPALIVE_SECONDS = 60.0
# client-go's retry.DefaultBackoff (10 ms, x5, 4 steps, 10 % jitter) as util.PatchPodStatus uses it.
DEFAULT_BACKOFF_STEPS = 4
# client-go's events broadcaster: maxTriesPerEvent and its sleep between tries.
EVENT_MAX_TRIES = 12
EVENT_RETRY_SECONDS = 10.0
EVENT_SERIES_WINDOW = 6 * 60.0  # client-go's events: isomorphic events within 6 min become a series
MAX_RETRIES = 10  # client-go's Request.maxRetries default

# One attempt's answer: (status, its Retry-After header if a 429 or 5xx has one, body).
_Answer = tuple[int, str | None, bytes]


class Gone(ApiError):
    """410: the resourceVersion is too old; the informer must re-list."""


class _Disconnected(ApiError):
    """The connection was reset or closed before the whole answer came (client-go's
    ``net.IsConnectionReset`` or ``IsProbableEOF``): the request may have been applied."""


def now_rfc3339(micro: bool = False) -> str:
    t = dt.datetime.now(dt.UTC)
    if micro:
        return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# metav1 Status reasons client-go knows (apimachinery's knownReasons): a 500/503 with one of
# these other than InternalError/ServiceUnavailable is not retried; with an unknown one it is.
KNOWN_REASONS = frozenset(
    {
        "Unauthorized", "Forbidden", "NotFound", "AlreadyExists", "Conflict", "Gone", "Invalid",
        "ServerTimeout", "StoreReadError", "Timeout", "TooManyRequests", "BadRequest",
        "MethodNotAllowed", "NotAcceptable", "RequestEntityTooLarge", "UnsupportedMediaType",
        "InternalError", "Expired", "ServiceUnavailable",
    }
)  # fmt: skip
# What client-go makes of an answer that is not a Status object (NewGenericServerResponse).
_GENERIC_REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
    406: "NotAcceptable", 409: "Conflict", 415: "UnsupportedMediaType", 422: "Invalid",
    429: "TooManyRequests", 503: "ServiceUnavailable", 504: "Timeout",
}  # fmt: skip


def _retriable(reason: str, code: int) -> bool:
    """``util.Retriable`` for an answer: ``IsInternalError || IsServiceUnavailable``."""
    if reason in ("InternalError", "ServiceUnavailable"):
        return True
    return reason not in KNOWN_REASONS and code in (500, 503)


def _error(status: int, text: str, what: str) -> ApiError:
    """Map an error answer like client-go: the Status's message, reason and code when the body is
    one, else the generic reason for the HTTP code. ``what`` (method and path) goes to the log."""
    reason, code, message = "", status, text.strip()
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        message = str(body.get("message") or message)
        reason = str(body.get("reason") or "")
        try:
            code = int(body.get("code") or status)
        except (TypeError, ValueError):
            code = status
    else:
        reason = _GENERIC_REASONS.get(status) or ("InternalError" if status >= 500 else "")
        if isinstance(body, dict) and body.get("message"):
            message = str(body["message"])
    logger.debug("%s: %s %s", what, status, message)
    if status == 409:
        return Conflict(message, status, reason)
    if status == 404:
        return NotFound(message, status, reason)
    if status == 410:
        return Gone(message, status, reason)
    if _retriable(reason, code):
        return TransientError(message, status, reason)
    return ApiError(message, status, reason)


def _connection_error(exc: BaseException, method: str, url: str, what: str) -> ApiError:
    """A request that got no answer. A refused connection is certainly not applied and is
    retriable (``net.IsConnectionRefused``), worded as client-go words it; a reset or timeout
    may have been applied, so it stays an ApiError (a reset or early close a ``_Disconnected``,
    which a GET retries)."""
    os_error = getattr(exc, "os_error", None)
    if (
        isinstance(exc, aiohttp.ClientConnectorError)
        and getattr(os_error, "errno", None) == errno.ECONNREFUSED
    ):
        host = f"{exc.host}:{exc.port}"
        return TransientError(f'{method.capitalize()} "{url}": dial tcp {host}: connect: connection refused')
    message = f"{what}: {type(exc).__name__}: {exc}"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError) or (
        isinstance(exc, aiohttp.ClientOSError) and exc.errno in (errno.ECONNRESET, errno.EPIPE)
    ):
        return _Disconnected(message)
    return ApiError(message)


def _retry_wait(status: int, retry_after: str | None) -> float | None:
    """client-go's ``checkWait``: seconds to wait before sending again, for a 429 or a 5xx with an
    integer ``Retry-After`` (``strconv.Atoi``: no HTTP date); None when it is not to be retried."""
    if retry_after is None or not (status == 429 or status >= 500):
        return None
    try:
        return float(max(0, int(retry_after)))
    except ValueError:
        return None


def list_page(data: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str, str]:
    """A decoded list response as ``(items, resourceVersion, continue token)``.

    List items carry no kind/apiVersion of their own; stamp them from the list so that every stored
    object looks like what a GET or a watch event returns.
    """
    meta = data.get("metadata") or {}
    items = data.get("items") or []
    kind = str(data.get("kind", "")).removesuffix("List")
    api_version = str(data.get("apiVersion", ""))
    for item in items:
        item.setdefault("kind", kind)
        item.setdefault("apiVersion", api_version)
    return items, str(meta.get("resourceVersion", "")), str(meta.get("continue") or "")


class ApiClient:
    """A thin async apiserver client: requests, paginated lists and watch streams."""

    pool_class: type[Http11Pool] = Http11Pool  # the lean pool (a benchmark swaps in variants)
    # clientConnection.qps/burst: every attempt of a request or listing takes a token first, as
    # client-go's tryThrottle (cluster/ratelimit.py). None: no client-side limit.
    rate_limiter: Throttle | None = None

    def __init__(
        self,
        credentials: Credentials,
        *,
        max_in_flight: int = 64,
        request_timeout: float = 30.0,
        user_agent: str = "kopf-scheduler",
        lean_requests: bool = True,
        max_retries: int = MAX_RETRIES,
        max_retry_wait: float = 30.0,
        write_fence: Callable[[], bool] | None = None,
    ) -> None:
        self.credentials = credentials
        self.server = credentials.server
        self.request_timeout = request_timeout
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        # Asked before a write is sent again after a wait: False (this replica no longer holds
        # the lead) fails it with the last error instead.
        self.write_fence = write_fence
        self._limit = asyncio.Semaphore(max_in_flight)
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        self._tls: tuple[Any, ...] = ()
        self._retired: list[aiohttp.ClientSession] = []
        self._closing: set[asyncio.Task[None]] = set()
        # Small requests (binds, events, patches) go through a lean HTTP/1.1 pool (cluster.http11
        # says why); listings and watches through aiohttp.
        self.lean_requests = lean_requests
        self._lean: Http11Pool | None = None
        self._lean_tls: tuple[Any, ...] = ()
        self._lean_info: Any = None
        self._proxied = False
        self._header_cache: tuple[Mapping[str, str], bytes] | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        tls = self.credentials.tls_material
        if self._session is not None and not self._session.closed and tls != self._tls:
            # The credentials now carry another client certificate or CA (an exec plugin may issue
            # certificates): new connections need a new SSL context. Requests in flight on the old
            # session finish; it is closed after a grace period.
            old, self._session = self._session, None
            self._retired.append(old)
            asyncio.get_running_loop().call_later(KEEPALIVE_SECONDS, self._retire, old)
        if self._session is None or self._session.closed:
            info = self.credentials.info
            self._tls = tls
            # HTTP/1.1: one connection per request in flight (client-go multiplexes one HTTP/2
            # connection instead), so keep them open between bursts rather than pay a TLS handshake
            # on both sides each time aiohttp's 15 s default expires. 60 s stays under
            # kube-apiserver's 90 s IdleTimeout, so we never reuse a socket the server is closing.
            # No pool limit: the semaphore bounds requests, and watches must never wait for one.
            connector = aiohttp.TCPConnector(
                limit=0, ssl=info.as_ssl_context(), ttl_dns_cache=300, keepalive_timeout=KEEPALIVE_SECONDS
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": self._user_agent, "Accept": "application/json"},
                trust_env=info.trust_env,
            )
            # aiohttp sends a PUT or DELETE once more after a dropped connection (its
            # IDEMPOTENT_METHODS); Go's transport re-sends no written request but a GET, and neither
            # may we (a DELETE of a preemption victim or a claim's PUT could apply twice). No public
            # switch exists; the attribute is read per request (aiohttp 3.9-3.14).
            self._session._retry_connection = False
        return self._session

    def _retire(self, old: aiohttp.ClientSession) -> None:
        if old in self._retired:
            self._retired.remove(old)
            task = asyncio.get_running_loop().create_task(old.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        while self._retired:
            await self._retired.pop().close()
        await asyncio.gather(*self._closing, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._lean is not None:
            self._lean.close()
            self._lean = None

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """One request within the in-flight bound, errors mapped; sent again after a 401 that a
        credential reload cures (token rotation) and where client-go would (``_retrying``)."""
        # orjson: encoding and decoding are a few percent of our CPU per pod in SchedulingBasic
        # (a bind, an event, two watch events), several times cheaper than the json module.
        data = orjson.dumps(body) if body is not None else None
        what = f"{method} {path}"

        async def attempt() -> _Answer:
            if self.rate_limiter is not None:
                await self.rate_limiter.acquire(what)
            async with self._limit:  # released while a Retry-After is waited out
                pool = self._pool()
                if pool is not None:
                    return await self._send_lean(pool, method, path, data, params, content_type, what)
                timeout = aiohttp.ClientTimeout(total=self.request_timeout)
                exchange = self._aiohttp_exchange(method, path, data, params, content_type, timeout, what)
                return await self._authorized(exchange)

        raw = await self._retrying(method, what, attempt)
        return orjson.loads(raw) if raw else None

    async def _retrying(self, method: str, what: str, attempt: Callable[[], Awaitable[_Answer]]) -> bytes:
        """The body of ``attempt``'s success, after as many attempts as client-go would make.

        client-go's ``Request.request`` with its ``withRetry``: up to ``max_retries`` (10) more
        attempts, for any method, when a 429 or 5xx answer carries an integer ``Retry-After``
        (``checkWait``), after that many seconds; and for a GET only, when the connection was reset
        or closed before the answer, after 1 s (a write may have been applied). client-go bounds
        the wait only by the request's context, which kube-scheduler's writes do not set; here a
        wait over ``max_retry_wait`` is not waited out but fails the request at once (the caller's
        own backoff then applies) rather than holding a bind as long as any server asks.
        """
        retries = 0
        while True:
            failure: ApiError
            try:
                status, retry_after, raw = await attempt()
            except _Disconnected as exc:
                if method != "GET" or retries >= self.max_retries:
                    raise
                wait, why, failure = 1.0, str(exc), exc
            else:
                if status < 400:
                    return raw
                asked = _retry_wait(status, retry_after)
                failure = _error(status, raw.decode("utf-8", "replace"), what)
                if asked is None or retries >= self.max_retries or asked > self.max_retry_wait:
                    raise failure
                wait, why = asked, f"{status}, Retry-After: {retry_after}"
            retries += 1
            logger.debug("%s: retry %d in %gs (%s)", what, retries, wait, why)  # client-go: V(4)
            await asyncio.sleep(wait)
            fence = self.write_fence
            if fence is not None and method != "GET" and not fence():
                raise failure  # the lead was lost while waiting: this replica may not write now

    def _pool(self) -> Http11Pool | None:
        """The lean keep-alive pool for small requests; None where aiohttp must go (a proxy)."""
        if not self.lean_requests:
            return None
        creds = self.credentials
        info = creds.info
        if info is not self._lean_info:  # a new credential load: its proxy settings, read once
            self._lean_info = info
            self._proxied = bool(info.proxy_url) or (info.trust_env and _environment_proxies())
        if self._proxied:
            return None
        tls = creds.tls_material
        pool = self._lean
        if pool is not None and self._lean_tls == tls:
            return pool
        if pool is not None:  # new TLS material: requests in flight on the old pool finish first
            asyncio.get_running_loop().call_later(KEEPALIVE_SECONDS, pool.close)
        scheme = urlsplit(self.server).scheme
        context = info.as_ssl_context() if scheme == "https" else None
        self._lean = self.pool_class(
            self.server,
            context,
            server_hostname=creds.tls_server_name,
            keepalive=KEEPALIVE_SECONDS,
            user_agent=self._user_agent,
        )
        self._lean_tls = tls
        return self._lean

    async def _send_lean(
        self,
        pool: Http11Pool,
        method: str,
        path: str,
        data: bytes | None,
        params: Mapping[str, str] | None,
        content_type: str,
        what: str,
    ) -> _Answer:
        """One attempt on the lean pool, with the 401 retry; connection errors mapped as
        ``_aiohttp_exchange`` maps aiohttp's."""
        target = f"{path}?{urlencode(params)}" if params else path

        async def exchange(headers: Mapping[str, str]) -> _Answer:
            lines = self._header_lines(headers)
            if data is not None:
                lines += b"Content-Type: " + content_type.encode() + b"\r\n"
            try:
                answer = await pool.request(method, target, lines, data, self.request_timeout)
            except ConnectionClosed as exc:
                raise _Disconnected(f"{what}: {exc}") from exc
            except (OSError, ProtocolError, ValueError) as exc:
                if isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED:
                    url = self.server + path
                    refused = f"dial tcp {pool.host}:{pool.port}: connect: connection refused"
                    raise TransientError(f'{method.capitalize()} "{url}": {refused}') from exc
                if isinstance(exc, ConnectionResetError):
                    raise _Disconnected(f"{what}: {exc}") from exc
                raise ApiError(f"{what}: {type(exc).__name__}: {exc}") from exc
            status = answer.status
            retry_after = answer.header("Retry-After") if status == 429 or status >= 500 else None
            return status, retry_after, answer.body

        return await self._authorized(exchange)

    async def _authorized(self, exchange: Callable[[Mapping[str, str]], Awaitable[_Answer]]) -> _Answer:
        """``exchange`` with the current credential's headers, once more after a 401 that a
        reload may cure (token rotation)."""
        creds = self.credentials
        headers = await creds.headers()
        used = creds.loaded
        answer = await exchange(headers)
        if answer[0] == 401 and await creds.rejected(used):
            answer = await exchange(await creds.headers())
        return answer

    def _header_lines(self, headers: Mapping[str, str]) -> bytes:
        """The credential's header lines, encoded once per credential load."""
        cached = self._header_cache
        if cached is not None and cached[0] is headers:
            return cached[1]
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode()
        self._header_cache = (headers, lines)
        return lines

    def _aiohttp_exchange(
        self,
        method: str,
        path: str,
        data: bytes | None,
        params: Mapping[str, str] | None,
        content_type: str,
        timeout: aiohttp.ClientTimeout,
        what: str,
    ) -> Callable[[Mapping[str, str]], Awaitable[_Answer]]:
        """One exchange on aiohttp, given the credential's headers."""
        creds = self.credentials

        async def exchange(auth: Mapping[str, str]) -> _Answer:
            headers = dict(auth)
            if data is not None:
                headers["Content-Type"] = content_type
            try:
                async with self.session.request(
                    method,
                    self.server + path,
                    data=data,
                    params=params,
                    headers=headers,
                    timeout=timeout,
                    proxy=creds.info.proxy_url,
                    server_hostname=creds.tls_server_name,
                ) as resp:
                    status = resp.status
                    retry_after = resp.headers.get("Retry-After") if status == 429 or status >= 500 else None
                    return status, retry_after, await resp.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise _connection_error(exc, method, self.server + path, what) from exc

        return exchange

    async def _send(
        self,
        method: str,
        path: str,
        *,
        data: bytes | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout: aiohttp.ClientTimeout,
        what: str,
    ) -> bytes:
        """The response body on aiohttp (listings), errors mapped, retried as ``request`` is."""
        exchange = self._aiohttp_exchange(method, path, data, params, content_type, timeout, what)

        async def attempt() -> _Answer:
            if self.rate_limiter is not None:
                await self.rate_limiter.acquire(what)
            return await self._authorized(exchange)

        return await self._retrying(method, what, attempt)

    async def list_pages(
        self, path: str, params: Mapping[str, str] | None = None, page_size: int = 500
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        """Yield ``(items, resourceVersion)`` page by page; the last page's version is the list's.

        A listing is the one large response the scheduler reads (75 MB for 50,000 pods): bytes
        decoded by orjson without a str copy, and no deadline on a transfer that progresses (only
        connect and idle-read timeouts). Like watches, listings are outside the in-flight bound.
        """
        query = dict(params or {})
        query["limit"] = str(page_size)
        what = f"LIST {path}"
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.request_timeout, sock_read=self.request_timeout
        )
        while True:
            raw = await self._send("GET", path, params=query, timeout=timeout, what=what)
            try:
                data = orjson.loads(raw)
            except ValueError as exc:
                raise ApiError(f"{what}: undecodable response: {exc}") from exc
            del raw
            items, version, token = list_page(data)
            yield items, version
            if not token:
                return
            query["continue"] = token

    async def watch(
        self,
        path: str,
        resource_version: str,
        params: Mapping[str, str] | None = None,
        timeout_seconds: int = 300,
        *,
        grace: float | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Stream watch events (``{"type", "object"}``) until the stream ends.

        The stream ends (the generator returns) when the server closes it (its ``timeoutSeconds``),
        and also when the connection breaks after the answer began (a reset, a truncated body) or
        nothing more came by ``timeout_seconds + grace`` (``WATCH_GRACE_SECONDS`` by default) after
        the request: client-go's StreamWatcher ends quietly on a probable EOF or a timeout too, and
        its reflector watches again from the last resourceVersion. The deadline is how a half-open
        connection (a peer gone without FIN or RST) is noticed: the server closes every watch at
        ``timeoutSeconds``, so a stream still open ``grace`` seconds later is dead. (client-go
        notices on HTTP/2 by its 30 s read-idle ping; a watch on HTTP/1.1 has nothing to ping, and
        a read-idle timeout would cut the healthy watches of quiet kinds, whose bookmarks come
        about once a minute.)

        Raises when no watch was established (a connection or HTTP error, mapped as ``request``
        maps them; 410 as :class:`Gone`; the deadline as a plain ApiError), for an ``ERROR`` event
        (mapped like an error answer of that code), and for a line that is not a watch event
        (``InternalError``, as client-go's ``ClientWatchDecoding``): the informer re-lists then.
        Lines are split by hand: a pod can exceed aiohttp's readline limit. Watches do not count
        against the in-flight bound.
        """
        query = dict(params or {})
        query.update(
            watch="1",
            allowWatchBookmarks="true",
            resourceVersion=resource_version,
            timeoutSeconds=str(timeout_seconds),
        )
        what = f"WATCH {path}"
        creds = self.credentials
        headers = dict(await creds.headers())
        used = creds.loaded
        grace = WATCH_GRACE_SECONDS if grace is None else grace
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds + grace
        try:
            async with asyncio.timeout_at(deadline):
                resp = await self.session.get(
                    self.server + path,
                    params=query,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.request_timeout),
                    proxy=creds.info.proxy_url,
                    server_hostname=creds.tls_server_name,
                )
                if resp.status >= 400:
                    async with resp:
                        if resp.status == 401:
                            await creds.rejected(used)  # the next watch (or re-list) uses the new one
                        raise _error(resp.status, await resp.text(), what)
        except aiohttp.ClientError as exc:  # before TimeoutError: aiohttp's connect timeout is both
            raise _connection_error(exc, "GET", self.server + path, what) from exc
        except TimeoutError as exc:
            raise ApiError(f"{what}: no answer in {timeout_seconds + grace:g}s") from exc
        # Past the deadline the connection is closed under the read, which then fails. A timer per
        # watch rather than a timeout scope per read: the scope would cost ~3.5 us a read, and one
        # spanning the ``yield`` would cancel the consumer's own awaits instead of the read.
        expired = loop.call_at(deadline, resp.close)
        try:
            async with resp:  # leaving early closes the connection; a stream read to its end is reused
                pending: list[bytes] = []  # the start of a line split across reads
                pending_size = 0
                while True:
                    try:
                        chunk = await resp.content.readany()
                    except (aiohttp.ClientError, OSError) as exc:
                        if loop.time() >= deadline:
                            logger.info("%s: still open %gs past its timeout; reconnecting", what, grace)
                        else:
                            logger.debug("%s: stream broken: %s: %s", what, type(exc).__name__, exc)
                        return
                    if not chunk:
                        if pending:
                            logger.debug("%s: stream ended inside an event (%d bytes)", what, pending_size)
                        return
                    start = 0
                    while (newline := chunk.find(b"\n", start)) >= 0:
                        line = chunk[start:newline]
                        start = newline + 1
                        if pending:
                            line = b"".join((*pending, line))
                            pending.clear()
                            pending_size = 0
                        if line.strip():
                            yield _watch_event(line, what)
                    if start < len(chunk):
                        pending.append(chunk[start:])
                        pending_size += len(chunk) - start
                        if pending_size > MAX_WATCH_LINE:
                            raise _undecodable(what, f"an event longer than {MAX_WATCH_LINE} bytes")
        finally:
            expired.cancel()


# Past a watch's timeoutSeconds, how long its stream may stay open before it is taken for dead.
WATCH_GRACE_SECONDS = 10.0
# No object the apiserver stores comes near this (etcd's request limit is 1.5 MiB); a stream that
# sends more without a newline is not a watch.
MAX_WATCH_LINE = 64 << 20


def _undecodable(what: str, detail: str) -> ApiError:
    """client-go's ClientWatchDecoding error: a 500 InternalError status."""
    message = f"{what}: unable to decode an event from the watch stream: {detail}"
    return TransientError(message, 500, "InternalError")


def _watch_event(line: bytes, what: str) -> dict[str, Any]:
    """One line as a watch event; an ERROR event raised as the error it carries.

    What client-go cannot decode into a ``metav1.WatchEvent`` (not JSON, not an object with a
    string type and an object, an ERROR whose Status code is not an integer) is a decoding error.
    """
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise _undecodable(what, f"{exc}: {line[:200]!r}") from exc
    if type(event) is not dict or type(event.get("type")) is not str or type(event.get("object")) is not dict:
        raise _undecodable(what, f"not a watch event: {line[:200]!r}")
    if event["type"] == "ERROR":
        status = event["object"]
        code = status.get("code")
        if type(code) is not int:
            raise _undecodable(what, f"an ERROR event without an integer code: {line[:200]!r}")
        raise _error(code, orjson.dumps(status).decode(), what)
    return event


def _environment_proxies() -> bool:
    """Whether HTTP(S)_PROXY-style variables are set (aiohttp with trust_env would use them)."""
    proxies = urllib.request.getproxies()
    return any(k in proxies for k in ("http", "https", "all"))


def _pod_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
    return f"{path}/{sub}" if sub else path


def _real_uid(pod: Pod) -> str | None:
    # parse_pod falls back to "ns/name" when the object has no uid (test objects); that is no UID.
    return pod.uid if pod.uid and "/" not in pod.uid else None


def _pod_ref(pod: Pod) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name}
    if uid := _real_uid(pod):
        ref["uid"] = uid
    if pod.resource_version:
        ref["resourceVersion"] = pod.resource_version
    return ref


def _pod_group_ref(group: PodGroup) -> dict[str, Any]:
    ref: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "namespace": group.namespace,
        "name": group.name,
    }
    if group.uid:
        ref["uid"] = group.uid
    return ref


def _condition(pod: Pod, ctype: str) -> Mapping[str, Any] | None:
    status = pod.raw.get("status") if isinstance(pod.raw, Mapping) else None
    for cond in (status or {}).get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == ctype:
            return cond
    return None


class KubeClusterClient:
    """Every write the engine asks of the cluster, over :class:`ApiClient`.

    Event and condition writes are best-effort like kube-scheduler's (it logs their errors and goes
    on): they never fail a scheduling or binding cycle. ``bind``/``evict``/``bind_volumes`` raise.
    """

    def __init__(
        self,
        api: ApiClient,
        *,
        instance: str | None = None,
        series_cache: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        fence: Callable[[], bool] | None = None,
    ) -> None:
        self.api = api
        self._fence = fence
        self.reporting_instance = instance or f"{REPORTING_CONTROLLER}-{socket.gethostname()}"
        # Isomorphic events (same pod, reason, note) within the window become a series on one object.
        # Least recently observed first, so expired series are found at the front.
        self._series: OrderedDict[tuple[str, str, str, str], tuple[str, str, int, float]] = OrderedDict()
        self._series_cache = series_cache
        self._clock = clock

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        """``api.request``, with writes fenced: a replica that may not act sends nothing."""
        fence = self._fence
        if fence is not None and method != "GET" and not fence():
            raise Fenced(f"{method} {path}: not sent, this replica does not hold the lead")
        return await self.api.request(method, path, **kwargs)

    # --- binding ------------------------------------------------------------------------------

    async def bind(self, pod: Pod, node_name: str) -> None:
        meta: dict[str, Any] = {"namespace": pod.namespace, "name": pod.name}
        if uid := _real_uid(pod):
            meta["uid"] = uid  # the apiserver checks it as a precondition: no binding a recreated pod
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        await self._request("POST", _pod_path(pod.namespace, pod.name, "binding"), body=body)

    async def bound_node(self, pod: Pod) -> str:
        raw = await self._request("GET", _pod_path(pod.namespace, pod.name))
        meta = raw.get("metadata") or {}
        uid = _real_uid(pod)
        if uid and meta.get("uid") != uid:
            return ""  # another pod of that name now: ours is not bound anywhere
        return str((raw.get("spec") or {}).get("nodeName") or "")

    # --- events and conditions ----------------------------------------------------------------

    async def record_scheduled(self, pod: Pod, node_name: str) -> None:
        note = f"Successfully assigned {pod.namespace}/{pod.name} to {node_name}"
        await self._event(pod, "Normal", "Scheduled", "Binding", note)

    async def record_failed(
        self, pod: Pod, reason: str, message: str, nominated_node: str | None = None
    ) -> None:
        await asyncio.gather(
            self._event(pod, "Warning", "FailedScheduling", "Scheduling", truncate_message(message)),
            self._set_scheduled_false(pod, reason, message, nominated_node),
        )

    async def _set_scheduled_false(
        self, pod: Pod, reason: str, message: str, nominated_node: str | None
    ) -> None:
        """One status patch for the condition and the nomination, skipped when neither changes."""
        status: dict[str, Any] = {}
        if nominated_node is not None and nominated_node != pod.nominated_node_name:
            status["nominatedNodeName"] = nominated_node or None
        old = _condition(pod, "PodScheduled")
        if not (
            old and (old.get("status"), old.get("reason"), old.get("message")) == ("False", reason, message)
        ):  # podutil.UpdatePodCondition: an unchanged condition is not written
            status["conditions"] = [self._scheduled_false(old, pod, reason, message)]
        if not status:
            return
        try:
            await self._patch_pod_status(pod, status)
        except NotFound:
            pass
        except ApiError as exc:
            logger.warning("Failed to update the PodScheduled condition of %s: %s", pod.key, exc)

    async def _patch_pod_status(self, pod: Pod, status: Mapping[str, Any]) -> None:
        """``util.PatchPodStatus``: the patch retried on what ``util.Retriable`` names (a refused
        connection, 500 InternalError, 503) with client-go's ``retry.DefaultBackoff``."""
        path = _pod_path(pod.namespace, pod.name, "status")
        delay = 0.01
        for step in range(DEFAULT_BACKOFF_STEPS):
            try:
                await self._request("PATCH", path, body={"status": status}, content_type=STRATEGIC)
                return
            except TransientError:
                if step == DEFAULT_BACKOFF_STEPS - 1:
                    raise
            await asyncio.sleep(delay * (1 + 0.1 * random.random()))
            delay *= 5

    @staticmethod
    def _scheduled_false(
        old: Mapping[str, Any] | None, pod: Pod, reason: str, message: str
    ) -> dict[str, Any]:
        cond: dict[str, Any] = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastProbeTime": None,
            # The transition time moves only when the status does.
            "lastTransitionTime": (old or {}).get("lastTransitionTime")
            if old and old.get("status") == "False"
            else now_rfc3339(),
        }
        if pod.generation:
            cond["observedGeneration"] = pod.generation
        return cond

    async def set_nominated_node(self, pod: Pod, node_name: str) -> None:
        if pod.nominated_node_name == node_name:
            return
        try:
            await self._patch_pod_status(pod, {"nominatedNodeName": node_name or None})
        except NotFound:
            pass
        except ApiError as exc:
            logger.warning("Failed to set nominatedNodeName of %s: %s", pod.key, exc)

    async def set_pod_group_conditions(
        self, namespace: str, name: str, conditions: Sequence[Mapping[str, Any]]
    ) -> None:
        path = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{namespace}/podgroups/{name}/status"
        await self._request(
            "PATCH",
            path,
            body={"status": {"conditions": [dict(c) for c in conditions]}},
            content_type="application/merge-patch+json",
        )

    async def _event(
        self,
        pod: Pod,
        type_: str,
        reason: str,
        action: str,
        note: str,
        related: Pod | Mapping[str, Any] | None = None,
    ) -> None:
        key = (pod.uid, reason, action, note)
        now = self._clock()
        self._expire_series(now)
        try:
            prior = self._series.get(key)
            if prior is not None and now - prior[3] < EVENT_SERIES_WINDOW:
                name, namespace, count, _ = prior
                count += 1
                self._series[key] = (name, namespace, count, now)
                self._series.move_to_end(key)
                try:
                    await self._request(
                        "PATCH",
                        f"/apis/events.k8s.io/v1/namespaces/{quote(namespace)}/events/{quote(name)}",
                        body={"series": {"count": count, "lastObservedTime": now_rfc3339(micro=True)}},
                        content_type=MERGE,
                    )
                    return
                except NotFound:
                    pass  # the event expired: start over
            name = f"{pod.name}.{time.time_ns():x}"
            body: dict[str, Any] = {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": pod.namespace},
                "eventTime": now_rfc3339(micro=True),
                "reportingController": REPORTING_CONTROLLER,
                "reportingInstance": self.reporting_instance,
                "action": action,
                "reason": reason,
                "regarding": _pod_ref(pod),
                "note": note,
                "type": type_,
            }
            if related is not None:
                body["related"] = _pod_ref(related) if isinstance(related, Pod) else dict(related)
            self._series[key] = (name, pod.namespace, 1, now)
            await self._post_event(pod.namespace, body)
            while len(self._series) > self._series_cache:
                self._series.popitem(last=False)
        except ApiError as exc:
            logger.warning("Failed to record the %s event of %s: %s", reason, pod.key, exc)

    async def _post_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        """client-go's events broadcaster: a write that got no answer is tried again, up to 12
        tries, the first retry after a random part of 10 s and the rest 10 s apart; an answer
        (even an error) is final. A replica that lost the lead meanwhile sends nothing more."""
        path = f"/apis/events.k8s.io/v1/namespaces/{quote(namespace)}/events"
        for tries in range(1, EVENT_MAX_TRIES + 1):
            try:
                await self._request("POST", path, body=body)
                return
            except Conflict:
                return  # AlreadyExists: an earlier try landed after all
            except Fenced:
                raise
            except ApiError as exc:
                if exc.status != 0 or tries == EVENT_MAX_TRIES:
                    raise
                pause = EVENT_RETRY_SECONDS * (random.random() if tries == 1 else 1.0)
                logger.info("Unable to write an event (%s); retrying in %.1fs", exc, pause)
                await asyncio.sleep(pause)

    def _expire_series(self, now: float) -> None:
        """Forget series last observed a window ago, as client-go's ``finishSeries`` does: they can
        never be extended, and keeping them (one per pod ever scheduled, ``Scheduled`` events
        never repeat) grew the map with the pods ever seen up to ``series_cache``."""
        series = self._series
        while series:
            key, (_, _, _, last) = next(iter(series.items()))
            if now - last < EVENT_SERIES_WINDOW:
                return
            del series[key]

    # --- preemption ---------------------------------------------------------------------------

    async def evict(self, victim: Pod, preemptor: Pod | PodGroup, message: str) -> None:
        """DisruptionTarget=True (PreemptionByScheduler), then delete, then a ``Preempted`` event."""
        if isinstance(preemptor, PodGroup):
            # The group's preemption has the whole cluster as its domain, named "cluster".
            note = f"Preempted by podgroup {preemptor.uid} on node cluster"
            related: dict[str, Any] = _pod_group_ref(preemptor)
        else:
            default = f"{preemptor.scheduler_name}: preempting to accommodate a higher priority pod"
            message = message or default
            note = f"Preempted by pod {preemptor.uid} on node {victim.node_name}"
            related = _pod_ref(preemptor)
        old = _condition(victim, "DisruptionTarget")
        if not (old and old.get("status") == "True" and old.get("reason") == "PreemptionByScheduler"):
            cond = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": message,
                "lastTransitionTime": now_rfc3339(),
            }
            try:
                await self._request(
                    "PATCH",
                    _pod_path(victim.namespace, victim.name, "status"),
                    body={"status": {"conditions": [cond]}},
                    content_type=STRATEGIC,
                )
            except NotFound:
                return  # already gone: nothing to preempt
        delete_body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid := _real_uid(victim):
            delete_body["preconditions"] = {"uid": uid}
        try:
            await self._request("DELETE", _pod_path(victim.namespace, victim.name), body=delete_body)
        except NotFound:
            return
        except Conflict:
            return  # a different pod of that name now: not our victim
        await self._event(
            victim,
            "Normal",
            "Preempted",
            "Preempting",
            note,
            related=related,
        )

    # --- volumes ------------------------------------------------------------------------------

    async def bind_volumes(self, pod: Pod, claims: Sequence[tuple[str, str]]) -> None:
        """Dynamic claims get the selected-node annotation; static ones bind their PV's claimRef.

        ``pod.node_name`` is the node chosen (VolumeBinding's PreBind gets the assumed pod).
        """
        node = pod.node_name
        if not node:
            raise ApiError(f"bind_volumes for {pod.key}: the pod has no node")
        await asyncio.gather(*(self._bind_claim(claim, pv, node) for claim, pv in claims))

    async def _bind_claim(self, claim_key: str, pv_name: str, node: str) -> None:
        namespace, _, name = claim_key.partition("/")
        pvc_path = f"/api/v1/namespaces/{quote(namespace)}/persistentvolumeclaims/{quote(name)}"
        if not pv_name:
            await self._request(
                "PATCH",
                pvc_path,
                body={"metadata": {"annotations": {SELECTED_NODE_ANNOTATION: node}}},
                content_type=MERGE,
            )
            return
        pvc = await self._request("GET", pvc_path)
        meta = pvc.get("metadata") or {}
        claim_ref = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": namespace,
            "name": name,
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        pv_path = f"/api/v1/persistentvolumes/{quote(pv_name)}"
        pv = await self._request("GET", pv_path)
        existing = (pv.get("spec") or {}).get("claimRef") or {}
        if existing.get("uid") == claim_ref["uid"] and existing.get("name") == name:
            return  # already bound to this claim
        if existing.get("name") and (existing.get("name"), existing.get("namespace")) != (name, namespace):
            owner = f"{existing.get('namespace')}/{existing.get('name')}"
            raise Conflict(f"PV {pv_name} is already claimed by {owner}", 409)
        # resourceVersion in the patch makes it a compare-and-swap: a concurrent binder gets 409.
        await self._request(
            "PATCH",
            pv_path,
            body={
                "metadata": {
                    "resourceVersion": (pv.get("metadata") or {}).get("resourceVersion"),
                    "annotations": {BOUND_BY_CONTROLLER_ANNOTATION: "yes"},
                },
                "spec": {"claimRef": claim_ref},
            },
            content_type=MERGE,
        )

    # --- resource claims (DynamicResources) -------------------------------------------------------

    async def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(await self._request("GET", _claim_path(namespace, name)))

    async def update_resource_claim(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        meta = claim.get("metadata") or {}
        path = _claim_path(str(meta.get("namespace") or "default"), str(meta.get("name", "")))
        return dict(await self._request("PUT", path, body=_claim_body(claim)))

    async def update_resource_claim_status(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        meta = claim.get("metadata") or {}
        path = _claim_path(str(meta.get("namespace") or "default"), str(meta.get("name", "")), "status")
        return dict(await self._request("PUT", path, body=_claim_body(claim)))

    async def unreserve_resource_claim(self, namespace: str, name: str, claim_uid: str, pod_uid: str) -> None:
        await self._request(
            "PATCH",
            _claim_path(namespace, name, "status"),
            body={
                "metadata": {"uid": claim_uid},
                "status": {"reservedFor": [{"$patch": "delete", "uid": pod_uid}]},
            },
            content_type=STRATEGIC,
        )


    async def create_resource_claim(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        namespace = str((claim.get("metadata") or {}).get("namespace") or "default")
        path = f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace)}/resourceclaims"
        return dict(await self._request("POST", path, body=_claim_body(claim)))

    async def delete_resource_claim(self, namespace: str, name: str, uid: str) -> None:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self._request("DELETE", _claim_path(namespace, name), body=body)
        except NotFound:
            return

    async def set_pod_extended_resource_claim_status(self, pod: Pod, status: Mapping[str, Any]) -> None:
        await self._request(
            "PATCH",
            _pod_path(pod.namespace, pod.name, "status"),
            body={"status": {"extendedResourceClaimStatus": dict(status)}},
            content_type=STRATEGIC,
        )


def _claim_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}"
    return f"{path}/{sub}" if sub else path


def _claim_body(claim: Mapping[str, Any]) -> dict[str, Any]:
    body = dict(claim)
    body.setdefault("apiVersion", "resource.k8s.io/v1")
    body.setdefault("kind", "ResourceClaim")
    return body
