"""The transport to the apiserver: raw HTTP on aiohttp and a lean HTTP/1.1 pool (client-go's ``rest``).

Requests and listing pages go over a lean HTTP/1.1 keep-alive pool (cluster/http11.py), watches
(and everything behind a proxy) over one shared ``aiohttp.ClientSession``, imported at the first
watch: the runtime opens its watches once its first cycle is through, so aiohttp's import (~0.06-0.09
s) is not on the way to the first bind (issue 30). A semaphore bounds the requests in flight, so a
burst of thousands of binds neither opens thousands of sockets nor trips the apiserver's
max-in-flight limit. No call blocks the event loop; JSON payloads are small.
Errors are mapped and retried as client-go's ``rest.Request`` maps and retries them; listings are
paged and watch streams decoded as its reflector reads them. What is written where (binds, events,
status patches, claims) is :mod:`kopf_scheduler.cluster.client`'s business, not this module's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

import orjson

from kopf_scheduler.cluster.connection import Credentials, environment_proxies
from kopf_scheduler.cluster.http11 import MAX_BODY_BYTES, ConnectionClosed, Http11Pool, ProtocolError
from kopf_scheduler.cluster.prefetch import list_target
from kopf_scheduler.cluster.ratelimit import Throttle
from kopf_scheduler.framework.client import ApiError, Conflict, NotFound, TransientError

if TYPE_CHECKING:  # imported when first used: watches, and requests through a proxy (see ApiClient)
    import aiohttp

__all__ = [
    "MAX_WATCH_LINE",
    "WATCH_GRACE_SECONDS",
    "ApiClient",
    "Gone",
    "list_page",
]

logger = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 60.0
# A listing page's deadline on the lean pool (a 5,000-pod page is ~45 MB: under a second locally).
LEAN_LIST_SECONDS = 60.0
# The lean pool's cap on a listing page's body (aiohttp sets none): a page of 5,000 large objects.
LIST_MAX_BODY = 1 << 30
MAX_RETRIES = 10  # client-go's Request.maxRetries default

# One attempt's answer: (status, its Retry-After header if a 429 or 5xx has one, body).
_Answer = tuple[int, str | None, bytes]


class Gone(ApiError):
    """410: the resourceVersion is too old; the informer must re-list."""


class _LeanTimeout(ApiError):
    """No (whole) answer on the lean pool within the deadline."""


class _Disconnected(ApiError):
    """The connection was reset or closed before the whole answer came (client-go's
    ``net.IsConnectionReset`` or ``IsProbableEOF``): the request may have been applied."""


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
    import aiohttp

    if isinstance(exc, aiohttp.ClientConnectorError) and exc.os_error.errno == errno.ECONNREFUSED:
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
        rate_limiter: Throttle | None = None,
    ) -> None:
        self.credentials = credentials
        self.server = credentials.server
        self.request_timeout = request_timeout
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        # Asked before a write is sent again after a wait: False (this replica no longer holds
        # the lead) fails it with the last error instead.
        self.write_fence = write_fence
        # clientConnection.qps/burst: every attempt of a request or listing takes a token first, as
        # client-go's tryThrottle (cluster/ratelimit.py). None: no client-side limit.
        self.rate_limiter = rate_limiter
        self._limit = asyncio.Semaphore(max_in_flight)
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        self._tls: tuple[Any, ...] = ()
        self._retired: list[aiohttp.ClientSession] = []
        self._closing: set[asyncio.Task[None]] = set()
        # Small requests (binds, events, patches) go through a lean HTTP/1.1 pool (cluster.http11
        # says why), listing pages through one of their own (a larger body cap), watches through aiohttp.
        self.lean_requests = lean_requests
        self._lean: Http11Pool | None = None
        self._lean_lists: Http11Pool | None = None  # the same, for listing pages (a larger body cap)
        # Listings on the lean pool until a page misses its deadline (``_list_page``).
        self.lean_listings = lean_requests
        self._lean_tls: tuple[Any, ...] = ()
        self._lean_info: Any = None
        self._proxied = False
        self._header_cache: tuple[Mapping[str, str], bytes] | None = None
        # First listing pages already asked for by ``run`` before the engine was built (request
        # target -> (status, body)): cluster/prefetch.py. Each is taken once, by the first page.
        self.prefetched: dict[str, concurrent.futures.Future[tuple[int, bytes]]] = {}

    @property
    def session(self) -> aiohttp.ClientSession:
        import aiohttp

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
        for pool in (self._lean, self._lean_lists):
            if pool is not None:
                pool.close()
        self._lean = self._lean_lists = None

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
                import aiohttp

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

    def _pool(self, *, listing: bool = False) -> Http11Pool | None:
        """The lean keep-alive pool for small requests (``listing``: the one for listing pages);
        None where aiohttp must go (a proxy)."""
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
        if self._lean is None or self._lean_lists is None or self._lean_tls != tls:
            for old in (self._lean, self._lean_lists):
                if old is not None:  # new TLS material: requests in flight on the old pool finish first
                    asyncio.get_running_loop().call_later(KEEPALIVE_SECONDS, old.close)
            scheme = urlsplit(self.server).scheme
            context = info.as_ssl_context() if scheme == "https" else None
            self._lean, self._lean_lists = (
                self.pool_class(
                    self.server,
                    context,
                    server_hostname=creds.tls_server_name,
                    keepalive=KEEPALIVE_SECONDS,
                    user_agent=self._user_agent,
                    max_body=max_body,
                )
                for max_body in (MAX_BODY_BYTES, LIST_MAX_BODY)
            )
            self._lean_tls = tls
        return self._lean_lists if listing else self._lean

    async def _send_lean(
        self,
        pool: Http11Pool,
        method: str,
        path: str,
        data: bytes | None,
        params: Mapping[str, str] | None,
        content_type: str,
        what: str,
        *,
        timeout: float | None = None,
    ) -> _Answer:
        """One attempt on the lean pool, with the 401 retry; connection errors mapped as
        ``_aiohttp_exchange`` maps aiohttp's. ``timeout``: the answer's deadline (the client's
        request timeout by default)."""
        target = f"{path}?{urlencode(params)}" if params else path
        deadline = self.request_timeout if timeout is None else timeout

        async def exchange(headers: Mapping[str, str]) -> _Answer:
            lines = self._header_lines(headers)
            if data is not None:
                lines += b"Content-Type: " + content_type.encode() + b"\r\n"
            try:
                answer = await pool.request(method, target, lines, data, deadline)
            except ConnectionClosed as exc:
                raise _Disconnected(f"{what}: {exc}") from exc
            except TimeoutError as exc:
                raise _LeanTimeout(f"{what}: {type(exc).__name__}: {exc}") from exc
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
        import aiohttp

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
        early = self.prefetched.pop(list_target(path, params, page_size), None)
        while True:
            raw = await self._prefetched(early, what) if early is not None else None
            early = None
            if raw is None:
                raw = await self._list_page(path, query, what)
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

    async def _list_page(self, path: str, query: Mapping[str, str], what: str) -> bytes:
        """One page: on the lean pool for listings (no aiohttp to import before the first cycle),
        with a deadline of ``LEAN_LIST_SECONDS`` for the page; once a page missed it (a slow link),
        on aiohttp from then on, whose deadlines are idle-read ones only."""
        pool = self._pool(listing=True) if self.lean_listings else None
        if pool is None:
            import aiohttp

            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=self.request_timeout, sock_read=self.request_timeout
            )
            return await self._send("GET", path, params=query, timeout=timeout, what=what)

        async def attempt() -> _Answer:
            if self.rate_limiter is not None:
                await self.rate_limiter.acquire(what)
            return await self._send_lean(
                pool, "GET", path, None, query, "application/json", what, timeout=LEAN_LIST_SECONDS
            )

        try:
            return await self._retrying("GET", what, attempt)
        except _LeanTimeout:
            self.lean_listings = False
            logger.info(
                "%s: a page took over %gs; listing through aiohttp from now on", what, LEAN_LIST_SECONDS
            )
            raise

    @staticmethod
    async def _prefetched(early: concurrent.futures.Future[tuple[int, bytes]], what: str) -> bytes | None:
        """A prefetched page's body when it is a 200, else None: the page is asked for as usual,
        which retries, maps and reports what went wrong."""
        try:
            status, body = await asyncio.wrap_future(early)
        except Exception as exc:
            logger.debug("%s: the prefetched page is lost (%s); asking again", what, exc)
            return None
        if status != 200:
            logger.debug("%s: the prefetched page is a %d; asking again", what, status)
            return None
        return body

    async def list_all(
        self, path: str, params: Mapping[str, str] | None = None, page_size: int = 500
    ) -> tuple[list[dict[str, Any]], str]:
        """Every item of a list, its pages followed by their continue tokens, and the list's
        resourceVersion (the last page's: what a watch of the same collection starts from)."""
        items: list[dict[str, Any]] = []
        version = ""
        async for page, page_version in self.list_pages(path, params, page_size):
            items.extend(page)
            version = page_version
        return items, version

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
        import aiohttp

        creds = self.credentials
        headers = dict(await creds.headers())
        used = creds.loaded
        grace = WATCH_GRACE_SECONDS if grace is None else grace
        session = self.session  # made (aiohttp imported) at the first watch: before the deadline counts
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds + grace
        try:
            async with asyncio.timeout_at(deadline):
                resp = await session.get(
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
    proxies = environment_proxies()
    return any(k in proxies for k in ("http", "https", "all"))
