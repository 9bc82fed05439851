"""HTTP scheduler extenders, as kube-scheduler v1.37.2's ``HTTPExtender`` (``pkg/scheduler/extender.go``).

Each verb is one ``POST <urlPrefix>/<verb>`` of a JSON body in ``k8s.io/kube-scheduler/extender/v1``'s
shapes. Those types carry no json tags, so their keys are the Go field names (``Pod``, ``Nodes``,
``NodeNames``, ``FailedNodes``, ``Host``, ``Score``...), a nil pointer or map is ``null``, and an
answer's keys match case-insensitively, as encoding/json matches them. With ``nodeCacheCapable`` only
node names travel (``NodeNames``, ``NodeNameToMetaVictims``), else whole Nodes and Pods.

Errors read as the reference's (they end up in FailedScheduling notes): ``Post "URL": dial tcp
HOST:PORT: connect: connection refused``, ``Post "URL": context deadline exceeded (Client.Timeout
exceeded while awaiting headers)``, ``failed filter with extender at URL URL, code 500``, the
extender's own ``Error``, encoding/json's for a body that is no JSON.

Transport: aiohttp, as the rest of the edge. The extender is a web service of the user's, not the
apiserver: it needs what Go's ``http.Client`` does for the reference (TLS with a CA, a client
certificate, SNI ``serverName`` or no verification; a timeout over the whole exchange, ``httpTimeout``;
keep-alive connections; ``HTTP(S)_PROXY``/``NO_PROXY`` except for loopback, as ProxyFromEnvironment),
and aiohttp has all of it. The hand-written pool in ``http11.py`` is shaped for the apiserver's
small answers and is not meant for arbitrary servers; an extender call costs the extender's
own work plus a loopback or LAN round trip, where aiohttp's ~0.1 ms per request does not show.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import logging
import os
import ssl
import tempfile
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.config.gotext import go_quote
from kopf_scheduler.config.kubescheduler import ExtenderConfig, ExtenderTLSConfig
from kopf_scheduler.framework.extender import (
    ExtenderError,
    FilterResult,
    MetaVictims,
    Victims,
    uses_managed_resources,
)
from kopf_scheduler.framework.types import NodeInfo

__all__ = [
    "DEFAULT_EXTENDER_TIMEOUT",
    "ExtenderBuildError",
    "HTTPExtender",
    "bind_args",
    "build_extenders",
    "filter_args",
    "parse_filter_result",
    "parse_host_priority_list",
    "parse_preemption_result",
    "preemption_args",
]

log = logging.getLogger(__name__)

DEFAULT_EXTENDER_TIMEOUT = 5.0  # DefaultExtenderTimeout


class ExtenderBuildError(ValueError):
    """An extender that cannot be built (its TLS files); ``str()`` is the reference's message."""


# --- the bodies ----------------------------------------------------------------------------------


_TYPE_META = ("apiVersion", "kind")


def _object(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """An object as the reference's informer holds it: without TypeMeta (a watch event's objects
    carry apiVersion and kind, a list's items do not; client-go's typed objects never do)."""
    if "apiVersion" in raw or "kind" in raw:
        return {k: v for k, v in raw.items() if k not in _TYPE_META}
    return raw


def _pod_object(pod: Pod) -> Mapping[str, Any]:
    """The pod as the informer gave it (what the reference marshals), or its identity when it was
    built without one (simulate, tests)."""
    if pod.raw:
        return _object(pod.raw)
    return {"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}}


def _node_object(info: NodeInfo) -> Mapping[str, Any]:
    node = info.node
    assert node is not None
    return _object(node.raw) if node.raw else {"metadata": {"name": node.name, "uid": node.uid}}


def filter_args(pod: Pod, nodes: Sequence[NodeInfo], node_cache_capable: bool) -> dict[str, Any]:
    """``ExtenderArgs`` (filter and prioritize): names only for a node-cache-capable extender, else a
    NodeList (TypeMeta empty, so only ``metadata: {}`` and ``items``); the other field null."""
    if node_cache_capable:
        return {"Pod": _pod_object(pod), "Nodes": None, "NodeNames": [info.name for info in nodes]}
    items = [_node_object(info) for info in nodes]
    return {"Pod": _pod_object(pod), "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}


def bind_args(pod: Pod, node_name: str) -> dict[str, Any]:
    """``ExtenderBindingArgs``."""
    return {"PodName": pod.name, "PodNamespace": pod.namespace, "PodUID": pod.uid, "Node": node_name}


def preemption_args(pod: Pod, victims: Mapping[str, Victims], node_cache_capable: bool) -> dict[str, Any]:
    """``ExtenderPreemptionArgs``: victims by uid (``NodeNameToMetaVictims``) for a node-cache-capable
    extender, else whole pods (``NodeNameToVictims``); the other field null."""
    if node_cache_capable:
        meta = {
            name: {"Pods": [{"UID": p.uid} for p in v.pods], "NumPDBViolations": v.num_pdb_violations}
            for name, v in victims.items()
        }
        return {"Pod": _pod_object(pod), "NodeNameToVictims": None, "NodeNameToMetaVictims": meta}
    full = {
        name: {"Pods": [_pod_object(p) for p in v.pods], "NumPDBViolations": v.num_pdb_violations}
        for name, v in victims.items()
    }
    return {"Pod": _pod_object(pod), "NodeNameToVictims": full, "NodeNameToMetaVictims": None}


# --- reading answers as encoding/json does -------------------------------------------------------


def _json_kind(value: Any) -> str:
    """encoding/json's name for a JSON value's type in its UnmarshalTypeError."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _mismatch(value: Any, where: str, go_type: str) -> ExtenderError:
    kind = _json_kind(value)
    if kind == "number":
        kind = f"number {value}"
    return ExtenderError(f"json: cannot unmarshal {kind} into {where} of type {go_type}")


def _fields(obj: Any, struct: str, names: Sequence[str]) -> dict[str, Any]:
    """A JSON object's values for a Go struct's fields, keys matched as encoding/json matches them
    (exactly or case-insensitively; the last key that matches wins); unknown keys are ignored."""
    if obj is None:  # null: the zero value
        return {}
    if not isinstance(obj, dict):
        raise _mismatch(obj, "Go value", f"v1.{struct}")
    folded = {n.lower(): n for n in names}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = key if key in names else folded.get(key.lower()) if isinstance(key, str) else None
        if name is not None:
            out[name] = value
    return out


def _string(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _mismatch(value, f"Go struct field {field}", "string")
    return value


def _int64(value: Any, field: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise _mismatch(value, f"Go struct field {field}", "int64")
    return value


def _string_list(value: Any, field: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _mismatch(value, f"Go struct field {field}", "[]string")
    return [_string(v, field) for v in value]


def _string_map(value: Any, field: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _mismatch(value, f"Go struct field {field}", "v1.FailedNodesMap")
    return {k: _string(v, field) for k, v in value.items()}


def decode_json(body: bytes) -> Any:
    """The body's first JSON value, as ``json.NewDecoder(body).Decode`` reads it (what follows it
    is not read); its errors in encoding/json's words (the common ones word for word)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    text = body.decode("utf-8", errors="replace")
    start = len(text) - len(text.lstrip(" \t\r\n"))
    if start == len(text):
        raise ExtenderError("EOF")
    try:
        value, _ = json.JSONDecoder().raw_decode(text, start)
        return value
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip(" \t\r\n")):
            raise ExtenderError("unexpected EOF") from None
        if exc.msg.startswith("Expecting property name"):
            context = "looking for beginning of object key string"
        elif exc.msg == "Expecting ':' delimiter":
            context = "after object key"
        elif exc.msg == "Expecting ',' delimiter":
            context = "after object key:value pair"  # inside an array Go says "after array element"
        else:
            context = "looking for beginning of value"
        quoted = "'\\''" if text[exc.pos] == "'" else "'" + go_quote(text[exc.pos])[1:-1] + "'"
        raise ExtenderError(f"invalid character {quoted} {context}") from None


def parse_filter_result(data: Any, node_cache_capable: bool) -> FilterResult:
    """``ExtenderFilterResult``: its Error raised; the passing nodes from ``NodeNames`` (node-cache
    capable, when not null) or ``Nodes``' items, none when both are null."""
    names = ("Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error")
    f = _fields(data, "ExtenderFilterResult", names)
    error = _string(f.get("Error"), "ExtenderFilterResult.Error")
    if error:
        raise ExtenderError(error)
    node_names = _string_list(f.get("NodeNames"), "ExtenderFilterResult.NodeNames")
    passed: list[str] = []
    if node_cache_capable and node_names is not None:
        passed = node_names
    elif f.get("Nodes") is not None:
        items = _fields(f["Nodes"], "NodeList", ("items",)).get("items") or []
        if not isinstance(items, list):
            raise _mismatch(items, "Go struct field NodeList.Nodes.items", "[]v1.Node")
        for item in items:
            meta = _fields(item, "Node", ("metadata",)).get("metadata") or {}
            passed.append(_string(_fields(meta, "ObjectMeta", ("name",)).get("name"), "Node.metadata.name"))
    return FilterResult(
        passed,
        _string_map(f.get("FailedNodes"), "ExtenderFilterResult.FailedNodes"),
        _string_map(f.get("FailedAndUnresolvableNodes"), "ExtenderFilterResult.FailedAndUnresolvableNodes"),
    )


def parse_host_priority_list(data: Any) -> list[tuple[str, int]]:
    """``HostPriorityList``: ``[{"Host": name, "Score": n}, ...]``."""
    if data is None:
        return []
    if not isinstance(data, list):
        raise _mismatch(data, "Go value", "v1.HostPriorityList")
    out = []
    for item in data:
        f = _fields(item, "HostPriority", ("Host", "Score"))
        out.append(
            (_string(f.get("Host"), "HostPriority.Host"), _int64(f.get("Score"), "HostPriority.Score"))
        )
    return out


def parse_preemption_result(data: Any) -> dict[str, MetaVictims]:
    """``ExtenderPreemptionResult``: the victims it accepts, by node, as uids."""
    f = _fields(data, "ExtenderPreemptionResult", ("NodeNameToMetaVictims",))
    by_node = f.get("NodeNameToMetaVictims")
    if by_node is None:
        return {}
    if not isinstance(by_node, dict):
        raise _mismatch(
            by_node,
            "Go struct field ExtenderPreemptionResult.NodeNameToMetaVictims",
            "map[string]*v1.MetaVictims",
        )
    out: dict[str, MetaVictims] = {}
    for node_name, meta in by_node.items():
        if meta is None:
            out[node_name] = MetaVictims([])
            continue
        m = _fields(meta, "MetaVictims", ("Pods", "NumPDBViolations"))
        pods = m.get("Pods") or []
        if not isinstance(pods, list):
            raise _mismatch(pods, "Go struct field MetaVictims.Pods", "[]*v1.MetaPod")
        uids = [
            _string(_fields(p, "MetaPod", ("UID",)).get("UID"), "MetaPod.UID") for p in pods if p is not None
        ]
        out[node_name] = MetaVictims(uids, _int64(m.get("NumPDBViolations"), "MetaVictims.NumPDBViolations"))
    return out


def parse_binding_result(data: Any) -> None:
    """``ExtenderBindingResult``: its Error raised."""
    error = _string(
        _fields(data, "ExtenderBindingResult", ("Error",)).get("Error"), "ExtenderBindingResult.Error"
    )
    if error:
        raise ExtenderError(error)


# --- transport -----------------------------------------------------------------------------------


def _read(data: bytes, path: str) -> bytes:
    """``dataFromSliceOrFile``: the data if given, else the file's bytes (its error as Go's open)."""
    if data or not path:
        return data
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise ExtenderBuildError(f"open {path}: no such file or directory") from None
    except OSError as exc:
        raise ExtenderBuildError(f"open {path}: {(exc.strerror or str(exc)).lower()}") from None


def ssl_context(config: ExtenderConfig) -> ssl.SSLContext | None:
    """client-go's ``TLSConfigFor`` for the extender's ``tlsConfig`` (``makeTransport``):
    ``enableHTTPS`` without a CA means no verification; None when nothing is set (the system CAs
    then verify an https URL). Raise ExtenderBuildError with the reference's messages."""
    tls = config.tls_config or ExtenderTLSConfig()
    has_ca = bool(tls.ca_file or tls.ca_data)
    insecure = tls.insecure or (config.enable_https and not has_ca)
    has_cert = bool(tls.cert_file or tls.cert_data) and bool(tls.key_file or tls.key_data)
    if not (has_ca or has_cert or insecure or tls.server_name):
        return None
    if has_ca and insecure:
        raise ExtenderBuildError("specifying a root certificates file with the insecure flag is not allowed")
    ca = _read(tls.ca_data, tls.ca_file)
    cert = _read(tls.cert_data, tls.cert_file)
    key = _read(tls.key_data, tls.key_file)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if ca:
        try:  # the given CAs only, as Go's pool made of them
            ctx.load_verify_locations(cadata=ca.decode("ascii", errors="replace"))
        except (ssl.SSLError, ValueError):
            raise ExtenderBuildError(
                "unable to load root certificates: unable to parse bytes as PEM block"
            ) from None
    elif not insecure:
        ctx.load_default_certs()
    if has_cert:
        if b"-----BEGIN" not in cert:
            raise ExtenderBuildError("tls: failed to find any PEM data in certificate input")
        if b"-----BEGIN" not in key:
            raise ExtenderBuildError("tls: failed to find any PEM data in key input")
        # The ssl module loads a client certificate from files only: hand it a private copy.
        with tempfile.TemporaryDirectory(prefix="kopf-scheduler-extender-") as tmp:
            cert_path, key_path = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            cert_path.write_bytes(cert)
            key_path.touch(mode=0o600)
            key_path.write_bytes(key)
            try:
                ctx.load_cert_chain(str(cert_path), str(key_path))
            except ssl.SSLError:
                raise ExtenderBuildError("tls: private key does not match public key") from None
    return ctx


def _proxy_for(url: str) -> str | None:
    """``http.ProxyFromEnvironment``: HTTP(S)_PROXY unless NO_PROXY names the host; never for
    localhost or a loopback address."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass_environment(host, proxies):  # type: ignore[attr-defined]
        return None
    return proxy


def _connection_error(url: str, exc: BaseException) -> str:
    """What Go's client says when it got no answer (``*url.Error``: ``Post "URL": <cause>``)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    # aiohttp's connector errors carry the socket's OSError (``os_error``); a bare OSError is its own.
    os_error: OSError | None = None
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
    elif isinstance(exc, OSError):
        os_error = exc
    code = os_error.errno if os_error is not None else None
    if isinstance(exc, aiohttp.ClientConnectorCertificateError) or isinstance(
        os_error, ssl.SSLCertVerificationError
    ):
        cause = "tls: failed to verify certificate: x509: certificate signed by unknown authority"
        verify: BaseException | None = os_error
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):
            verify = exc.certificate_error
        if "hostname" in str(verify).lower() or "ip address mismatch" in str(verify).lower():
            cause = f"tls: failed to verify certificate: x509: certificate is not valid for {host}"
    elif isinstance(exc, aiohttp.ClientConnectorDNSError) or code in (
        -2,  # EAI_NONAME: getaddrinfo's codes, not errno's
        -3,
        -5,
    ):
        cause = f"dial tcp: lookup {host}: no such host"
    elif code == errno.ECONNREFUSED:
        cause = f"dial tcp {address}: connect: connection refused"
    elif code in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        cause = f"dial tcp {address}: connect: {os.strerror(code).lower()}"
    elif isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        cause = "EOF"
    elif code == errno.ECONNRESET:
        cause = f"read tcp {address}: read: connection reset by peer"
    elif code is not None:
        cause = f"dial tcp {address}: {os.strerror(code).lower()}"
    else:
        cause = str(exc) or type(exc).__name__
    return f'Post "{url}": {cause}'


class HTTPExtender:
    """One ``extenders[]`` entry over HTTP (``HTTPExtender``); implements framework.extender.Extender."""

    def __init__(self, config: ExtenderConfig, fence: Callable[[], bool] | None = None) -> None:
        self.config = config
        # The lead's fence (cluster/leader.py): a bind is a write, even when the extender makes it.
        self._fence = fence
        self._url_prefix = config.url_prefix
        self._timeout = config.http_timeout or DEFAULT_EXTENDER_TIMEOUT
        self._managed = frozenset(name for name, _ in config.managed_resources)
        self._ssl = ssl_context(config)
        self._server_name = config.tls_config.server_name if config.tls_config else ""
        self._proxy = _proxy_for(config.url_prefix)
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"HTTPExtender({self._url_prefix!r})"

    @property
    def name(self) -> str:
        return self._url_prefix

    def is_ignorable(self) -> bool:
        return self.config.ignorable

    def is_filter(self) -> bool:
        return bool(self.config.filter_verb)

    def is_prioritizer(self) -> bool:
        return bool(self.config.prioritize_verb)

    def is_binder(self) -> bool:
        return bool(self.config.bind_verb)

    def supports_preemption(self) -> bool:
        return bool(self.config.preempt_verb)

    def ignored_resources(self) -> list[str]:
        return [name for name, ignored in self.config.managed_resources if ignored]

    def is_interested(self, pod: Pod) -> bool:
        return uses_managed_resources(pod, self._managed)

    async def filter(self, pod: Pod, nodes: Sequence[NodeInfo]) -> FilterResult:
        if not self.config.filter_verb:
            return FilterResult([info.name for info in nodes])
        cache = self.config.node_cache_capable
        answer = await self._send(self.config.filter_verb, filter_args(pod, nodes, cache))
        return parse_filter_result(answer, cache)

    async def prioritize(self, pod: Pod, nodes: Sequence[NodeInfo]) -> tuple[list[tuple[str, int]], int]:
        if not self.config.prioritize_verb:
            return [(info.name, 0) for info in nodes], 0
        args = filter_args(pod, nodes, self.config.node_cache_capable)
        answer = await self._send(self.config.prioritize_verb, args)
        return parse_host_priority_list(answer), self.config.weight

    async def bind(self, pod: Pod, node_name: str) -> None:
        if not self.config.bind_verb:
            raise ExtenderError("unexpected empty bindVerb in extender")
        if self._fence is not None and not self._fence():
            raise ExtenderError(f"{self.config.bind_verb}: not sent, this replica does not hold the lead")
        parse_binding_result(await self._send(self.config.bind_verb, bind_args(pod, node_name)))

    async def process_preemption(
        self, pod: Pod, node_name_to_victims: Mapping[str, Victims]
    ) -> dict[str, MetaVictims]:
        if not self.config.preempt_verb:
            raise ExtenderError(
                f"preempt verb is not defined for extender {self._url_prefix} but run into ProcessPreemption"
            )
        args = preemption_args(pod, node_name_to_victims, self.config.node_cache_capable)
        return parse_preemption_result(await self._send(self.config.preempt_verb, args))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # Proxies are chosen per URL above (loopback never proxied), not from the environment here.
            connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else True, limit=0)
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self._session

    async def _send(self, verb: str, args: Mapping[str, Any]) -> Any:
        """``send``: POST the JSON body, expect 200, decode the answer; every failure an ExtenderError
        in the reference's words. ``httpTimeout`` bounds the whole exchange, body included."""
        url = self._url_prefix.rstrip("/") + "/" + verb
        body = orjson.dumps(args, default=dict)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        headers = {"Content-Type": "application/json"}
        kwargs: dict[str, Any] = {"proxy": self._proxy}
        if self._server_name:
            kwargs["server_hostname"] = self._server_name
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._client().post(url, data=body, headers=headers, **kwargs)
        except TimeoutError:
            raise ExtenderError(
                f'Post "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ExtenderError(_connection_error(url, exc)) from exc
        async with response:
            if response.status != 200:
                raise ExtenderError(f"failed {verb} with extender at URL {url}, code {response.status}")
            try:
                async with asyncio.timeout_at(deadline):
                    payload = await response.read()
            except TimeoutError:
                raise ExtenderError(
                    "context deadline exceeded (Client.Timeout or context cancellation while reading body)"
                ) from None
            except (aiohttp.ClientError, OSError):
                raise ExtenderError("unexpected EOF") from None  # the body broke off
        return decode_json(payload)


def build_extenders(configs: Sequence[ExtenderConfig]) -> list[HTTPExtender]:
    """``buildExtenders``: one HTTPExtender each, the ignorable ones moved to the end (the order they
    are asked in). Raise ExtenderBuildError with ``couldn't build extenders: ...`` as the reference."""
    required: list[HTTPExtender] = []
    ignorable: list[HTTPExtender] = []
    for config in configs:
        try:
            ext = HTTPExtender(config)
        except ExtenderBuildError as exc:
            raise ExtenderBuildError(f"couldn't build extenders: {exc}") from None
        (ignorable if ext.is_ignorable() else required).append(ext)
    return required + ignorable
