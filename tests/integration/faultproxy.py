"""A TCP fault proxy between ``kopf-scheduler run`` and kube-apiserver: network faults on a real socket.

The scheduler's kubeconfig points at the proxy (:meth:`FaultProxy.kubeconfig`); TLS passes through
untouched (the serving certificate is for 127.0.0.1, which the proxy listens on too). Faults, once
:meth:`FaultProxy.arm`-ed, each drawn per qualifying answer:

- **lost**: the request went upstream and the apiserver's answer starts arriving (it applied the
  request); the proxy resets the client's connection (``SO_LINGER`` 0: an RST) without relaying a
  byte of it, as a dying node, NAT or load balancer does;
- **slow**: the answer is held for ``slow_seconds``, then relayed whole;
- **refuse**: the answer is relayed, then the proxy closes its idle connections (a FIN, as a
  restarting proxy or apiserver does) and its listening socket for ``refuse_seconds``: every
  connect meanwhile gets the kernel's RST, ``ECONNREFUSED``.

Aiming at Bindings without reading them (the bytes are encrypted): TLS record headers are in clear,
so the proxy sees where each request and each answer starts and how long the answer's first record
is. An answer qualifies when both hold:

- its request was sent after :meth:`~FaultProxy.arm`. The informers' and Kopf's lists and watches
  (aiohttp) were requested before the test arms the proxy, and a watch lasts 300 s; what sends
  requests during a burst is the lean keep-alive pool of the small requests
  (``cluster/http11.py``): binds, events, status patches and the bind read-back's GET. So listings
  are not broken over and over; and the connections a refusal window closes are the pool's (those
  that carried a request since :meth:`~FaultProxy.arm`), never a watch's.
- its first record is small (``small``): on this control plane a Binding's 201 ``Status`` answer
  is a 435-byte record and a 409 about 710; an event POST answers with the event (~1.4 kB),
  a status patch and the read-back's GET with the whole pod (~1.5-2.6 kB). So the read-back that
  resolves a lost Binding is never lost itself. (The apiserver here asks for no client
  certificate, so Go sends its TLS 1.3 session ticket in its first flight, before any request:
  the first record after a request is the answer's.)

A lost response and a refusal window are kept ``quiet`` seconds apart: a lost Binding's read-back,
sent within milliseconds of the reset, must not meet a refused connect.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import re
import socket
import struct
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FaultProxy", "Faults"]

TLS_APPLICATION_DATA = 23
# A client application-data record at least this long is a request: the TLS 1.3 handshake's own
# encrypted records from the client (an empty Certificate, Finished) are under 60 bytes.
REQUEST_MIN = 100


@dataclass
class Faults:
    """What the proxy does to qualifying answers (fractions of them), and what it did."""

    lost: float = 0.0
    slow: float = 0.0
    slow_seconds: float = 2.0
    refuse: float = 0.0
    refuse_seconds: float = 0.2
    small: int = 800  # an answer qualifies when its first TLS record is at most this long
    quiet: float = 0.3
    injected: dict[str, int] = field(default_factory=lambda: {"lost": 0, "slow": 0, "refused": 0})
    # (first record length, qualified) of every answer to a request sent while armed
    answers: list[tuple[int, bool]] = field(default_factory=list)


class _Records:
    """The TLS record headers in a byte stream fed in arbitrary chunks."""

    __slots__ = ("head", "skip")

    def __init__(self) -> None:
        self.skip = 0
        self.head = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int]]:
        """``(content type, length)`` of each record whose header completes in ``data``."""
        out: list[tuple[int, int]] = []
        i, n = 0, len(data)
        while i < n:
            if self.skip:
                take = min(self.skip, n - i)
                self.skip -= take
                i += take
                continue
            need = 5 - len(self.head)
            self.head += data[i : i + need]
            i += min(need, n - i)
            if len(self.head) == 5:
                ctype, _version, length = struct.unpack("!BHH", self.head)
                out.append((ctype, length))
                self.skip = length
                self.head.clear()
        return out


class _Upstream(asyncio.Protocol):
    def __init__(self, link: _Link) -> None:
        self.link = link

    def data_received(self, data: bytes) -> None:
        self.link.from_server(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.close()


class _Link(asyncio.Protocol):
    """One client connection and its upstream connection."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.client: asyncio.Transport | None = None
        self.server: asyncio.Transport | None = None
        self.to_server = bytearray()  # client bytes before the upstream connection is up
        self.eligible = False  # a request went through while armed
        self.client_records = _Records()
        self.server_records = _Records()
        self.awaiting = False  # a request went upstream; its answer has not started yet
        self.answers = 0  # answers begun on this connection
        self.held: bytearray | None = None  # a slow answer being held
        self.undecided = bytearray()  # an answer's first bytes, before its first record's header
        self.closed = False

    # --- client side ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client = transport  # type: ignore[assignment]
        self.proxy.links.add(self)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        try:
            transport, _ = await asyncio.get_running_loop().create_connection(
                lambda: _Upstream(self), self.proxy.upstream_host, self.proxy.upstream_port
            )
        except OSError:
            self.reset()
            return
        if self.closed:
            transport.close()
            return
        self.server = transport
        if self.to_server:
            self.server.write(bytes(self.to_server))
            self.to_server.clear()

    def data_received(self, data: bytes) -> None:
        for ctype, length in self.client_records.feed(data):
            if ctype == TLS_APPLICATION_DATA and length >= REQUEST_MIN:
                self.awaiting = True
                self.eligible = self.eligible or self.proxy.armed
        if self.server is not None:
            self.server.write(data)
        else:
            self.to_server += data

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    # --- server side ---

    def from_server(self, data: bytes) -> None:
        if self.closed or self.client is None:
            return
        records = self.server_records.feed(data)
        if self.held is not None:
            self.held += data
            return
        if self.awaiting and not records:  # not even the first record's header yet: wait for it
            self.undecided += data
            return
        if self.undecided:
            data, self.undecided = bytes(self.undecided) + data, bytearray()
        if self.awaiting:
            self.awaiting = False
            self.answers += 1
            verdict = self.proxy.verdict(self, records[0][1])
            if verdict == "lost":
                self.reset()
                return
            if verdict == "slow":
                self.held = bytearray(data)
                asyncio.get_running_loop().call_later(self.proxy.faults.slow_seconds, self._release)
                return
        self.client.write(data)

    def _release(self) -> None:
        held, self.held = self.held, None
        if held and not self.closed and self.client is not None:
            self.client.write(bytes(held))

    # --- teardown ---

    def idle(self) -> bool:
        """A kept-alive connection between requests: one answered already (a new one's first
        request may be on its way), none waiting for its answer, no answer half relayed."""
        records = self.server_records
        return (
            self.answers > 0
            and not self.awaiting
            and self.held is None
            and not self.undecided
            and not records.skip
            and not records.head
        )

    def reset(self) -> None:
        """RST to the client (``SO_LINGER`` 0), FIN upstream."""
        if self.client is not None and not self.closed:
            sock = self.client.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.client.abort()
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.proxy.links.discard(self)
        if self.client is not None:
            self.client.close()
        if self.server is not None:
            self.server.close()


class FaultProxy:
    """Listens on 127.0.0.1 (an ephemeral port) and relays to ``upstream`` (``https://host:port``)."""

    def __init__(self, upstream: str, *, seed: int | None = None) -> None:
        match = re.fullmatch(r"https://([^:/]+):(\d+)/?", upstream)
        if match is None:
            raise ValueError(f"unsupported upstream {upstream!r}")
        self.upstream = upstream
        self.upstream_host, self.upstream_port = match.group(1), int(match.group(2))
        self.faults = Faults()
        self.armed = False
        self.links: set[_Link] = set()
        self.port = 0
        self._rng = random.Random(seed)
        self._calm_until = 0.0  # no lost response nor refusal before this (monotonic)
        self._last_lost = 0.0
        self._window: asyncio.Task[None] | None = None  # the last refusal window
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)

    # --- lifecycle (from the test's thread) ---

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen()).result(10)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._shutdown()).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kubeconfig(self, source: Path, target: Path) -> Path:
        """A copy of ``source`` whose server is the proxy."""
        text = source.read_text()
        if self.upstream not in text:
            raise ValueError(f"{source} does not name {self.upstream}")
        target.write_text(text.replace(self.upstream, f"https://127.0.0.1:{self.port}"))
        return target

    def arm(self, **faults: float) -> Faults:
        """Inject (``Faults`` fields) into the answers to requests sent from now on."""
        self.faults = Faults(**faults)  # type: ignore[arg-type]
        self.armed = True
        return self.faults

    def disarm(self) -> None:
        """No more faults; returns once a refusal window under way is over."""
        self.armed = False
        self._call(self._window_over()).result(60)

    def _call(self, coro: Coroutine[object, object, None]) -> concurrent.futures.Future[None]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    # --- in the proxy's loop ---

    async def _listen(self) -> None:
        self._server = await self._loop.create_server(
            lambda: _Link(self), "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self.links):
            link.close()

    async def _window_over(self) -> None:
        if self._window is not None:
            await self._window

    async def _refuse(self, seconds: float) -> None:
        assert self._server is not None
        self._server.close()
        for link in list(self.links):
            if link.eligible and link.idle():
                link.close()
        await asyncio.sleep(seconds)
        await self._listen()
        self._calm_until = time.monotonic() + self.faults.quiet

    def verdict(self, link: _Link, first_record: int) -> str | None:
        """``lost``, ``slow`` or None (relay) for an answer whose first record is that long."""
        if not (self.armed and link.eligible):
            return None
        faults = self.faults
        qualifies = first_record <= faults.small
        faults.answers.append((first_record, qualifies))
        if not qualifies:
            return None
        now = time.monotonic()
        calm = now >= self._calm_until
        r = self._rng.random()
        if r < faults.lost:
            if not calm:
                return None
            self._last_lost = now
            faults.injected["lost"] += 1
            return "lost"
        r -= faults.lost
        if r < faults.slow:
            faults.injected["slow"] += 1
            return "slow"
        r -= faults.slow
        if r < faults.refuse and calm and now - self._last_lost >= faults.quiet:
            self._calm_until = float("inf")  # until the window ends
            faults.injected["refused"] += 1
            self._window = self._loop.create_task(self._refuse(faults.refuse_seconds))
        return None
