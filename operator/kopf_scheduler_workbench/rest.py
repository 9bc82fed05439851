"""The workbench's one REST helper: a small apiserver client and where each kind is served.

Bench, fidelity and the invariant checker's live read (``clusterstate``) all talk to the apiserver
through :class:`Api`, and take their paths from the product's registry of kinds
(:mod:`kopf_scheduler.api.kinds`) through :func:`collection`, :func:`item_path` and
:func:`object_path`, never written by hand.

Its own small aiohttp client rather than the product's ``ApiClient`` or ``kubernetes``' generated
one: creating 50,000 objects through the generated client costs more CPU in the runner than the
scheduler under test spends, and on a 2-core machine every CPU second the runner burns is taken from
the processes being measured; and the workbench wants a runner's retries (any 429 or 5xx, a create
that landed on an earlier try is done), where ``ApiClient`` retries only as client-go does.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp

from kopf_scheduler.api import kinds
from kopf_scheduler.cluster.connection import load_credentials

__all__ = ["MERGE_PATCH", "Api", "RequestError", "collection", "item_path", "object_path"]

MERGE_PATCH = "application/merge-patch+json"
_JSON = "application/json"
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_RETRIED = frozenset({429, 500, 502, 503, 504})


def collection(obj: Mapping[str, Any]) -> str:
    """Where to create ``obj``: its kind's collection (in its namespace, ``default`` when unset)."""
    return kinds.by_name(str(obj["kind"])).collection(obj["metadata"].get("namespace", "default"))


def item_path(obj: Mapping[str, Any]) -> str:
    """``obj`` itself (to GET, PATCH, PUT or DELETE it)."""
    return f"{collection(obj)}/{quote(str(obj['metadata']['name']))}"


def object_path(kind: kinds.Kind[Any], name: str, namespace: str | None = None, subresource: str = "") -> str:
    """An object of ``kind`` by name (and namespace), or its ``subresource`` (``status``, ``binding``)."""
    path = f"{kind.collection(namespace)}/{quote(name)}"
    return f"{path}/{subresource}" if subresource else path


class RequestError(RuntimeError):
    """An answer the request gave up on (not tried again, or out of attempts)."""

    def __init__(self, method: str, path: str, status: int, text: str) -> None:
        super().__init__(f"{method} {path}: {status} {text[:300]}")
        self.status = status


class Api:
    """A minimal apiserver client: bounded concurrency, retries on throttling and transient errors.

    TLS is not verified: the workbench talks to its own control plane on loopback.
    """

    def __init__(self, server: str, token: str | None = None, *, concurrency: int = 32) -> None:
        self.server = server.rstrip("/")
        self.headers = {"Content-Type": _JSON}
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"
        self.concurrency = concurrency
        self._ssl: ssl.SSLContext | None = None
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str, context: str | None = None, *, concurrency: int = 32) -> Api:
        """The kubeconfig's server and user (token or client certificate), loaded once, as the
        product loads them (``kopf_scheduler.cluster.connection``)."""
        info = load_credentials(kubeconfig, context).info
        api = cls(info.server, concurrency=concurrency)
        api.headers.update(info.as_http_headers())
        api._ssl = info.as_ssl_context()
        return api

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            ctx = self._ssl
            if ctx is None:
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            connector = aiohttp.TCPConnector(limit=self.concurrency + 8, ssl=ctx, keepalive_timeout=600)
            self._session = aiohttp.ClientSession(connector=connector, headers=self.headers)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Api:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        attempts: int = 12,
        content_type: str = _JSON,
        missing_ok: bool = False,
    ) -> dict[str, Any]:
        """One call, tried again on 429/5xx and connection errors; 409 on a POST tried again counts
        as done (its first try landed), and so does 404 where ``missing_ok``."""
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        headers = None if content_type == _JSON else {"Content-Type": content_type}
        delay = 0.1
        for attempt in range(attempts):
            try:
                async with self.session.request(
                    method, self.server + path, data=data, headers=headers
                ) as resp:
                    text = await resp.text()
                    if resp.status < 300:
                        return dict(json.loads(text)) if text else {}
                    if resp.status == 409 and method == "POST" and attempt > 0:
                        return {}
                    if resp.status == 404 and missing_ok:
                        return {}
                    if resp.status not in _RETRIED or attempt == attempts - 1:
                        raise RequestError(method, path, resp.status, text)
            except (TimeoutError, aiohttp.ClientError):
                if attempt == attempts - 1:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise RuntimeError(f"{method} {path}: out of attempts")

    async def patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON merge patch."""
        return await self.request("PATCH", path, body, content_type=MERGE_PATCH)

    async def delete(self, path: str, *, grace_period: int | None = None) -> None:
        """Delete; gone already is fine. ``grace_period=0`` deletes a pod at once (no kubelet runs)."""
        body = None
        if grace_period is not None:
            body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace_period}
        await self.request("DELETE", path, body, missing_ok=True)

    async def listing(
        self, kind: kinds.Kind[Any], namespace: str | None = None, **params: str
    ) -> dict[str, Any]:
        """One list of ``kind`` (across namespaces unless ``namespace``) with ``params`` (selectors,
        ``limit``, ``continue``): the list object, with its ``metadata.resourceVersion``."""
        path = kind.collection(namespace)
        return await self.request("GET", f"{path}?{urlencode(params)}" if params else path)

    async def list_all(self, kind: kinds.Kind[Any], namespace: str | None = None, **params: str) -> list[Any]:
        """Every item of ``kind``, page by page (their continue tokens)."""
        items: list[Any] = []
        query = {"limit": "500", **params}
        while True:
            page = await self.listing(kind, namespace, **query)
            items.extend(page.get("items") or ())
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            query["continue"] = str(token)

    async def request_counts(self) -> dict[str, float]:
        """The apiserver's ``apiserver_request_total``, summed per "VERB resource[/subresource]".

        Diffed around the measured phase, it shows what each scheduler asks of the apiserver per
        pod (binds, events, status patches, watches): the apiserver's CPU is most of this machine's.
        """
        text = (await self.fetch("/metrics")).decode()
        counts: dict[str, float] = {}
        for line in text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels_text, _, value = line[len("apiserver_request_total{") :].rpartition("} ")
            labels = dict(_LABEL.findall(labels_text))
            key = f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
            if labels.get("subresource"):
                key += "/" + labels["subresource"]
            counts[key] = counts.get(key, 0.0) + float(value)
        return counts

    async def fetch(self, path: str, timeout: float = 120.0) -> bytes:
        """A raw GET (``/metrics``, ``/debug/pprof/...``): bytes, no retries."""
        async with self.session.get(self.server + path, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            data = await resp.read()
            if resp.status >= 300:
                raise RuntimeError(f"GET {path}: {resp.status} {data[:300]!r}")
            return data

    async def warm(self, path: str = "/version") -> None:
        """Open all ``concurrency`` connections now: a TLS handshake costs more than a POST.

        Without it the first measured pods pay for handshakes (about 0.7 s for 20 of them here).
        """
        await asyncio.gather(*(self.request("GET", path) for _ in range(self.concurrency)))

    async def create_all(
        self,
        path_of: Callable[[Mapping[str, Any]], str],
        bodies: Sequence[Mapping[str, Any]],
        *,
        posted_at: dict[str, float] | None = None,
    ) -> float:
        """POST every body with ``concurrency`` workers; returns the wall seconds it took.

        ``path_of(body)`` gives the collection path (:func:`collection` where the body says its
        kind). ``posted_at`` receives each object's name -> ``time.monotonic()`` just before its
        POST: the creation time used for latencies.
        """
        started = time.monotonic()
        it = iter(bodies)

        async def worker() -> None:
            for body in it:  # the shared iterator hands each body to exactly one worker
                if posted_at is not None:
                    posted_at[body["metadata"]["name"]] = time.monotonic()
                await self.request("POST", path_of(body), body)

        await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        return time.monotonic() - started

    async def watch_lines(
        self, path: str, params: Mapping[str, str], timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield watch events (dicts) until the server ends the stream or ``timeout`` passes."""
        query = {**params, "watch": "1", "timeoutSeconds": str(max(1, int(timeout)))}
        client_timeout = aiohttp.ClientTimeout(total=timeout + 30, sock_read=timeout + 30)
        async with self.session.get(self.server + path, params=query, timeout=client_timeout) as resp:
            if resp.status != 200:
                raise RuntimeError(f"watch {path}: {resp.status} {(await resp.text())[:300]}")
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
