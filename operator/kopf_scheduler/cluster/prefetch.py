"""The informers' first listing requests, sent before the engine is imported and built.

Why: between the process's start and its first cycle, ~0.3 s go to importing and building the
engine, during which the apiserver could already be reading and serializing the nodes and the
pods. ``kopf-scheduler run`` sends the first page of the Node and the Pod listings at once (each
from a thread of its own, on a blocking socket: no event loop runs yet) and the informers take the
answer when they list (:meth:`ApiClient.list_pages` looks for it), instead of asking then.

A first listing is a consistent read without a version (``Informer._list_params``), so an answer
a few hundred milliseconds older than the one asked later is the same kind of snapshot; the watch
starts from its resourceVersion and misses nothing. Anything but a complete 200 (a refused or
broken connection, an error answer, an unexpected form) is dropped, and the informer asks as usual
(retries, 401 reloads, rate limits, error mapping all stay there). Sent only where the listing
would go straight to the apiserver: not through a proxy, not with delayCacheUntilActive (a standby
lists only once it leads).
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from urllib.parse import urlencode, urlsplit

import httptools

from kopf_scheduler.cluster.connection import Credentials, environment_proxies

__all__ = ["FIRST_LISTINGS", "MAX_BODY_BYTES", "OBJECT_LISTINGS", "Prefetch", "list_target"]

logger = logging.getLogger(__name__)

# The first page of what the runtime's Node and Pod informers list first (runtime.SchedulerRuntime:
# the kinds' paths in api/kinds.py, the pod field selector, Informer's page size), spelled here so
# that sending them needs none of those imports; tests/unit/test_prefetch.py holds them equal.
PAGE_SIZE = 5000
FIRST_LISTINGS: tuple[tuple[str, Mapping[str, str]], ...] = (
    ("/api/v1/nodes", {}),
    ("/api/v1/pods", {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"}),
)
# The first page of every object kind the runtime always informs (api/kinds.OBJECT_KINDS, in its
# order; held equal by the same test). Mostly empty or small, they are asked on one keep-alive
# connection of their own: asked by the informers, each was a TLS handshake and a request on the
# event loop's one core (~0.6 ms of CPU a handshake here) at the start of the listing, where the
# Node and Pod pages are being parsed; a blocking thread does the handshake and the reads with the
# GIL released. The requests are pipelined (HTTP/1.1: written at once, answered in order, which
# Go's net/http server does on one connection): asked in turn, each step waited for the answer and
# then for the GIL (up to a 5 ms switch interval while the main thread decodes the node listing),
# and the chain ended after the engine was ready for its first cycle. The apiserver still serves
# them one after another (~0.7 ms each at 1,000 nodes); what is saved is the thread's waits.
OBJECT_LISTINGS: tuple[tuple[str, Mapping[str, str]], ...] = tuple(
    (path, {})
    for path in (
        "/api/v1/persistentvolumeclaims",
        "/api/v1/persistentvolumes",
        "/apis/storage.k8s.io/v1/storageclasses",
        "/apis/storage.k8s.io/v1/csinodes",
        "/apis/storage.k8s.io/v1/csidrivers",
        "/apis/storage.k8s.io/v1/volumeattachments",
        "/apis/storage.k8s.io/v1/csistoragecapacities",
        "/apis/policy/v1/poddisruptionbudgets",
        "/api/v1/namespaces",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        "/api/v1/services",
        "/api/v1/replicationcontrollers",
        "/apis/apps/v1/replicasets",
        "/apis/apps/v1/statefulsets",
        "/apis/resource.k8s.io/v1/resourceclaims",
        "/apis/resource.k8s.io/v1/resourceslices",
        "/apis/resource.k8s.io/v1/deviceclasses",
        "/apis/resource.k8s.io/v1/devicetaintrules",
    )
)
MAX_BODY_BYTES = 512 << 20  # past this, the answer is dropped and the informer asks itself
_PROXIED = frozenset({"https", "http", "all"})  # what ApiClient sends through a proxy

# (HTTP status, body) of a complete answer.
Answer = tuple[int, bytes]


def list_target(path: str, params: Mapping[str, str] | None, page_size: int) -> str:
    """A listing page's request target, as ``ApiClient.list_pages`` sends its first page."""
    query = dict(params or {})
    query["limit"] = str(page_size)
    return f"{path}?{urlencode(query)}"


class _Answers:
    """llhttp's callbacks for the answers to pipelined requests, read in order from one stream: at
    the end of each final answer, the next future gets it (status, body); 1xx answers are interim."""

    def __init__(self, futures: list[Future[Answer]]) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.futures = futures
        self.done = 0  # futures resolved, in order
        self.body: list[bytes] = []
        self.size = 0

    def on_message_begin(self) -> None:
        self.body.clear()  # an answer's (or a 1xx's) body starts: the one before was taken
        self.size = 0

    def on_body(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > MAX_BODY_BYTES:
            raise ValueError(f"body over {MAX_BODY_BYTES} bytes")
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:
            return  # interim: the answer follows
        if self.done == len(self.futures):
            raise ValueError("an answer to no request")
        self.futures[self.done].set_result((status, b"".join(self.body)))
        self.done += 1


class Prefetch:
    """The early answers by request target; :meth:`take` hands them to whoever lists."""

    def __init__(self) -> None:
        self._answers: dict[str, Future[Answer]] = {}

    @classmethod
    def start(
        cls,
        credentials: Credentials,
        listings: tuple[tuple[str, Mapping[str, str]], ...] = FIRST_LISTINGS,
        in_turn: tuple[tuple[str, Mapping[str, str]], ...] = OBJECT_LISTINGS,
        timeout: float = 30.0,
    ) -> Prefetch:
        """Send ``listings``' first pages now, each from a daemon thread of its own, and ``in_turn``'s
        pipelined from one more thread on one connection; nothing when proxied."""
        prefetch = cls()
        info = credentials.info
        if info.proxy_url or (info.trust_env and _PROXIED.intersection(environment_proxies())):
            return prefetch
        split = urlsplit(credentials.server)
        context = info.as_ssl_context() if split.scheme == "https" else None
        host = split.hostname or "localhost"
        port = split.port or (443 if split.scheme == "https" else 80)
        netloc = split.netloc.rpartition("@")[2]
        auth = "".join(f"{k}: {v}\r\n" for k, v in info.as_http_headers().items())
        sni = credentials.tls_server_name or host

        def request(path: str, params: Mapping[str, str], close: bool) -> tuple[bytes, Future[Answer]]:
            target = list_target(path, params, PAGE_SIZE)
            ending = "Connection: close\r\n\r\n" if close else "\r\n"
            head = (
                f"GET {target} HTTP/1.1\r\nHost: {netloc}\r\nUser-Agent: kopf-scheduler\r\n"
                f"Accept: application/json\r\n{auth}{ending}"
            ).encode()
            future: Future[Answer] = Future()
            prefetch._answers[target] = future
            return head, future

        for path, params in listings:
            head, future = request(path, params, close=True)
            args = (host, port, context, sni, [(head, future)], timeout)
            threading.Thread(target=_fetch, args=args, name=f"prefetch {path}", daemon=True).start()
        if in_turn:
            last = len(in_turn) - 1
            asks = [request(path, params, close=i == last) for i, (path, params) in enumerate(in_turn)]
            args = (host, port, context, sni, asks, timeout)
            threading.Thread(target=_fetch, args=args, name="prefetch objects", daemon=True).start()
        return prefetch

    def take(self) -> dict[str, Future[Answer]]:
        """The answers (each target's once): ``ApiClient.prefetched``."""
        answers, self._answers = self._answers, {}
        return answers


def _fetch(
    host: str,
    port: int,
    context: ssl.SSLContext | None,
    server_hostname: str,
    asks: list[tuple[bytes, Future[Answer]]],
    timeout: float,
) -> None:
    """Requests pipelined on one blocking socket: every head written at once, the answers read in
    order from the stream, each future resolved as its answer ends (bytes of the next answer in the
    same read are kept for it). At the first failure, the answer being read and every later one
    get the exception (their informers ask). The heads are a few KB, well within the socket
    buffers, so writing them all before reading cannot wait on the server's writing.

    The thread needs the GIL after every TLS record (16 KB) and gets it every switch interval
    (5 ms) while the imports run, so most of a large answer is read once they are done; the
    apiserver's reading and serializing has been overlapped with them by then, which is the point.
    (A 0.5 ms interval while reading got the answers in before the runtime was built, but slowed
    the imports by more than it saved: 5,000 nodes' runtime started 0.42-0.67 s after the process
    instead of 0.39-0.41 s.)"""
    answers = _Answers([future for _, future in asks])
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            sock = context.wrap_socket(raw, server_hostname=server_hostname) if context else raw
            with sock:
                sock.sendall(b"".join(head for head, _ in asks))
                buffer = bytearray(1 << 20)
                view = memoryview(buffer)
                while answers.done < len(asks):
                    n = sock.recv_into(buffer)
                    if n == 0:
                        raise ConnectionError("closed before the whole answer")
                    answers.parser.feed_data(view[:n])
    except Exception as exc:  # the informers ask again, and report what they get then
        for head, future in asks[answers.done :]:
            logger.debug("Prefetching %s failed: %s", head.split(b" ", 2)[1].decode(), exc)
            future.set_exception(exc)
