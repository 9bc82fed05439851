"""Credentials for the apiserver, shared by Kopf (its login handler) and our own aiohttp client.

Kopf is not imported here: the runtime loads its credentials before Kopf starts (``run.py``), and
Kopf's login handler (``operator.py``) turns a :class:`ConnectionInfo` into Kopf's own.

Kubeconfig and in-cluster credentials are read by the ``kubernetes`` library's config loaders,
which know what a real cluster hands out: exec credential plugins (EKS, GKE, AKS), client
certificates (files or data), tokens and token files, OIDC/gcp auth-providers, contexts, proxy URLs,
``tls-server-name`` and ``insecure-skip-tls-verify``. Only loading goes through the library; traffic
stays on our aiohttp session (``client.py``) and Kopf's.

We construct the library's loader ourselves instead of calling ``load_kube_config``: that keeps the
library's global default configuration untouched (the tests talk to two clusters from one process)
and gives us the credential's expiry, so we run an exec plugin again only when its credential has
expired or the apiserver answered 401 (client-go's rule), not on every request.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import json
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ConnectionInfo",
    "Credentials",
    "Loaded",
    "LoginError",
    "environment_proxies",
    "from_kubeconfig",
    "in_cluster",
    "load_credentials",
]

logger = logging.getLogger(__name__)

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Token files (in-cluster, kubeconfig ``tokenFile``) are rewritten by the kubelet as tokens rotate;
# client-go re-reads them every minute, and so do we.
FILE_REFRESH_SECONDS = 60.0
# Renew an expiring credential this long before its expiry, so no request leaves with a token that
# expires in flight (client-go's exec authenticator renews on expiry; this margin only avoids 401s).
EXPIRY_MARGIN_SECONDS = 2.0
# After a failed reload, keep the old credential this long before the next attempt: a broken plugin
# must not be run again by every request.
RETRY_SECONDS = 10.0


class LoginError(Exception):
    """No usable credentials: the reason, readable (Kopf's login handler raises Kopf's own from it)."""


PathLike = str | bytes | os.PathLike[str] | os.PathLike[bytes]


@dataclass(frozen=True, kw_only=True)
class ConnectionInfo:
    """One endpoint and its credentials: the fields of ``kopf.ConnectionInfo``, by the same names.

    Ours, so that loading credentials does not import Kopf (the login handler converts it).
    """

    server: str  # e.g. "https://localhost:443"
    ca_path: PathLike | None = None
    ca_data: str | bytes | None = None
    insecure: bool | None = None
    username: str | None = None
    password: str | None = None
    scheme: str | None = None  # RFC 7235's auth-scheme: Bearer, Basic, ...
    token: str | None = None
    certificate_path: PathLike | None = None
    certificate_data: str | bytes | None = None
    private_key_path: PathLike | None = None
    private_key_data: str | bytes | None = None
    default_namespace: str | None = None
    proxy_url: str | None = None
    trust_env: bool = False
    priority: int = 0
    expiration: dt.datetime | None = None  # timezone-aware, or naive meaning UTC

    def __post_init__(self) -> None:
        for what, path, data in (
            ("CA", self.ca_path, self.ca_data),
            ("certificate", self.certificate_path, self.certificate_data),
            ("private key", self.private_key_path, self.private_key_data),
        ):
            if path and data:
                raise ValueError(f"Both {what} path & data are set. Need only one.")

    def as_http_headers(self) -> dict[str, str]:
        """The ``Authorization`` header: basic auth, else scheme and token; empty without either."""
        if self.username and self.password:
            pair = base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")
            return {"Authorization": f"Basic {pair}"}
        if self.scheme and self.token:
            return {"Authorization": f"{self.scheme} {self.token}"}
        if self.scheme:
            return {"Authorization": self.scheme}
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        return {}

    def as_ssl_context(self) -> ssl.SSLContext:
        """The CA to verify the server with and the client certificate, if any.

        Certificate and key given as data pass through temporary files for an instant: Python's
        :mod:`ssl` loads them from files only.
        """
        with contextlib.ExitStack() as stack:

            def path_of(path: PathLike | None, data: str | bytes | None) -> PathLike | None:
                if path or not data:
                    return path or None
                file = stack.enter_context(tempfile.NamedTemporaryFile(buffering=0))
                file.write(_pem(data).encode("ascii"))
                return file.name

            cert = path_of(self.certificate_path, self.certificate_data)
            key = path_of(self.private_key_path, self.private_key_data)
            context = ssl.create_default_context(
                purpose=ssl.Purpose.SERVER_AUTH,
                cafile=self.ca_path,
                cadata=_pem(self.ca_data) if self.ca_data is not None else None,
            )
            if cert and key:
                context.load_cert_chain(certfile=cert, keyfile=key)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


def environment_proxies(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The ``*_proxy`` variables as ``urllib.request.getproxies_environment`` reads them (what aiohttp
    with ``trust_env`` uses): any case, the lowercase one winning, an empty lowercase one unsetting,
    ``HTTP_PROXY`` ignored under CGI (``REQUEST_METHOD`` set). Spelled here because importing
    ``urllib.request`` brings ``http.client`` and ``email`` (~5 ms) onto the way to the first bind;
    ``test_connection`` holds it equal to the library's."""
    proxies = {}
    for name, value in environ.items():
        key = name.lower()
        if value and key[-6:] == "_proxy":
            proxies[key[:-6]] = value
    if "REQUEST_METHOD" in environ:
        proxies.pop("http", None)
    for name, value in environ.items():
        if name[-6:] == "_proxy":
            key = name.lower()[:-6]
            if value:
                proxies[key] = value
            else:
                proxies.pop(key, None)
    return proxies


def _pem(data: str | bytes) -> str:
    """PEM text from PEM or from base64 of PEM (kubeconfig's ``*-data`` fields)."""
    text = data.decode("ascii") if isinstance(data, bytes) else data
    if text.startswith("-----BEGIN "):
        return text
    return base64.b64decode(text).decode("ascii")


@dataclass(frozen=True)
class Loaded:
    """One load of the credentials: what both HTTP clients need, and when to load them again."""

    info: ConnectionInfo  # ``info.expiration``: when an exec/auth-provider credential expires
    tls_server_name: str | None = None
    reload_every: float | None = None  # seconds; for credentials read from files that rotate


class Credentials:
    """The current credentials, reloaded through their source when expired, stale or rejected (401).

    ``source`` performs one (blocking) load; None means static credentials (tests, fixed tokens).
    Reloads are serialised: a burst of requests that all find the credential expired, or all got a
    401, runs an exec plugin once.
    """

    def __init__(
        self,
        info: ConnectionInfo | Loaded,
        source: Callable[[], Loaded] | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._source = source
        self._clock = clock
        self._lock = threading.Lock()
        self._alock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self.loads = 0
        self._given_to_kopf = False
        self._set(info if isinstance(info, Loaded) else Loaded(info))

    def _set(self, loaded: Loaded) -> None:
        self.loaded = loaded
        self.info = loaded.info
        self.loaded_at = self._clock()
        self._headers = loaded.info.as_http_headers()
        self.loads += 1
        # When to load again, computed once: every request asks (``stale()``).
        due = float("inf")
        expires = self.expires_at()
        if expires is not None:
            due = expires - EXPIRY_MARGIN_SECONDS
        if loaded.reload_every is not None:
            due = min(due, self.loaded_at + loaded.reload_every)
        self._due = due if self._source is not None else float("inf")

    @property
    def server(self) -> str:
        return self.info.server.rstrip("/")

    @property
    def tls_server_name(self) -> str | None:
        return self.loaded.tls_server_name

    @property
    def tls_material(self) -> tuple[Any, ...]:
        """What the SSL context is built from: exec plugins may issue certificates, needing a new one."""
        i = self.info
        return (i.ca_path, i.ca_data, i.insecure, i.certificate_path, i.certificate_data,
                i.private_key_path, i.private_key_data)  # fmt: skip

    def expires_at(self) -> float | None:
        """POSIX time the current credential stops being valid, or None."""
        exp = self.info.expiration
        if exp is None:
            return None
        if exp.tzinfo is None:
            exp = exp.replace(tzinfo=dt.UTC)
        return exp.timestamp()

    def stale(self) -> bool:
        """Expired (within the margin) or, for rotating files, older than the reload period."""
        return self._clock() >= self._due

    def reload(self, *, unless_newer_than: Loaded | None = None) -> None:
        """Load again (blocking). With ``unless_newer_than``, skip if another caller already replaced it."""
        if self._source is None:
            return
        with self._lock:
            if unless_newer_than is not None and self.loaded is not unless_newer_than:
                return
            self._set(self._source())

    def _async_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._alock is None or self._alock[0] is not loop:
            self._alock = (loop, asyncio.Lock())
        return self._alock[1]

    async def headers(self) -> dict[str, str]:
        """The Authorization header for the next request; reloads (off the loop) first if stale."""
        if self.stale():
            seen = self.loaded
            async with self._async_lock():
                if self.loaded is seen and self.stale():
                    await self._reload_off_loop(seen)
        return self._headers

    async def rejected(self, used: Loaded) -> bool:
        """The apiserver answered 401 to ``used``: reload once; True if a retry may now succeed."""
        if self._source is None:
            return False
        async with self._async_lock():
            if self.loaded is used:
                await self._reload_off_loop(used)
        return self.loaded is not used

    async def _reload_off_loop(self, seen: Loaded) -> None:
        try:
            await asyncio.to_thread(self.reload, unless_newer_than=seen)
        except LoginError as exc:
            # Keep the old credential: the request goes out and fails visibly (401 -> ApiError),
            # and a request after RETRY_SECONDS tries again; a refresh failure never stops the scheduler.
            logger.error("Reloading the credentials failed: %s", exc)
            self._due = self._clock() + RETRY_SECONDS

    def connection_info(self) -> ConnectionInfo:
        """For Kopf's login handler (runs in a thread; blocking is fine there).

        Kopf logs in at start-up, then again only when ``expiration`` has passed or after a 401:
        then the credential it held is no good, and handing back an equal one would make Kopf
        discard it ("ran out of valid credentials"), so every login after the first loads anew.
        """
        if self._source is not None and (self._given_to_kopf or self.stale()):
            self.reload()
        self._given_to_kopf = True
        return self.info


# --- loading through the kubernetes library ----------------------------------------------------


class _CaptureErrors(logging.Handler):
    """The library logs, rather than raises, an exec plugin's failure; keep the message for the error."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "kubernetes" in record.pathname:  # not another thread's unrelated error
            self.messages.append(record.getMessage())


@contextlib.contextmanager
def _library_errors(where: str) -> Iterator[_CaptureErrors]:
    root = logging.getLogger()
    capture = _CaptureErrors()
    root.addHandler(capture)
    try:
        yield capture
    except LoginError:
        raise
    except Exception as exc:  # ConfigException, OSError, KeyError, ... from a bad kubeconfig
        detail = "; ".join([*capture.messages, f"{type(exc).__name__}: {exc}"])
        raise LoginError(f"{where}: {detail}") from exc
    finally:
        root.removeHandler(capture)


def _split_authorization(header: str | None) -> tuple[str | None, str | None]:
    """``"Bearer abc"`` -> ("Bearer", "abc"); the library writes ``bearer`` for in-cluster tokens."""
    if not header:
        return None, None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()  # token files end in a newline the library keeps; client-go trims it
    if not token:
        return None, scheme
    return ("Bearer" if scheme.lower() == "bearer" else scheme), token


def _info_from(config: Any, **extra: Any) -> ConnectionInfo:
    """A ``kubernetes.client.Configuration`` as a ConnectionInfo."""
    header = config.api_key.get("BearerToken") or config.api_key.get("authorization")
    scheme, token = _split_authorization(header)
    return ConnectionInfo(
        server=config.host,
        ca_path=config.ssl_ca_cert or None,
        insecure=None if config.verify_ssl else True,
        scheme=scheme,
        token=token,
        certificate_path=config.cert_file or None,
        private_key_path=config.key_file or None,
        proxy_url=config.proxy or None,
        **extra,
    )


def _user_of(config: Any, context: Mapping[str, Any]) -> Mapping[str, Any]:
    """The context's ``user`` entry of a merged kubeconfig (empty when it names none)."""
    name = (context.get("context") or {}).get("user")
    if not name or "users" not in config:
        return {}
    entry = config["users"].get_with_name(name, safe=True)
    user = entry.safe_get("user") if entry is not None else None
    return dict(user) if isinstance(user, Mapping) else {}


def _kubeconfig_source(paths: str, context: str | None) -> Callable[[], Loaded]:
    """A loader of ``paths`` (``$KUBECONFIG`` syntax: ``:``-separated, merged like kubectl)."""

    def load() -> Loaded:
        static = _static_kubeconfig(paths, context)
        if static is not None:
            return static
        from kubernetes.client import Configuration
        from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

        with _library_errors(f"kubeconfig {paths}") as capture:
            merger = KubeConfigMerger(paths)
            if merger.config is None:
                raise LoginError(f"kubeconfig {paths}: no such file")

            def persist() -> None:  # a refreshed auth-provider token, as kubectl does; best effort
                with contextlib.suppress(OSError):
                    merger.save_changes()

            loader = KubeConfigLoader(
                config_dict=merger.config,
                active_context=context,
                config_base_path=None,
                config_persister=persist,
            )
            config = Configuration()
            loader.load_and_set(config)
            user = _user_of(merger.config, loader.current_context)
            has_secret = bool(config.api_key.get("BearerToken") or (config.cert_file and config.key_file))
            if not has_secret and (user.get("exec") or user.get("auth-provider")):
                kind = "exec plugin" if user.get("exec") else "auth-provider"
                why = "; ".join(capture.messages) or "it produced no token and no client certificate"
                raise LoginError(f"kubeconfig {paths}: the {kind} gave no credential: {why}")
            if not config.host:
                raise LoginError(f"kubeconfig {paths}: the cluster has no server")
            context_node = loader.current_context.get("context") or {}
            # The library sets ``expiry`` only for some exec/auth-provider answers (it asks its own
            # __dict__ for it): an optional attribute the library does not type.
            expiry = getattr(loader, "expiry", None)
            info = _info_from(
                config,
                default_namespace=context_node.get("namespace"),
                expiration=expiry if isinstance(expiry, dt.datetime) else None,
            )
        reload_every = FILE_REFRESH_SECONDS if user.get("tokenFile") and not user.get("token") else None
        return Loaded(info, tls_server_name=config.tls_server_name, reload_every=reload_every)

    return load


def _in_cluster_source(sa_dir: Path) -> Callable[[], Loaded]:
    """client-go's ``rest.InClusterConfig``, read here: the library's loader is the same few checks,
    and importing it (the whole ``kubernetes`` package) cost ~0.1 s of every start-up."""

    def read(path: Path, what: str) -> str:
        if not path.exists():
            raise LoginError(f"in-cluster service account: {what} file {path} does not exist")
        text = path.read_text(encoding="utf-8").strip()
        if not text:
            raise LoginError(f"in-cluster service account: {what} file {path} exists but is empty")
        return text

    def load() -> Loaded:
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise LoginError("in-cluster service account: KUBERNETES_SERVICE_HOST/_PORT are not set")
        token = read(sa_dir / "token", "token")
        read(sa_dir / "ca.crt", "CA certificate")
        ns_file = sa_dir / "namespace"
        namespace = ns_file.read_text(encoding="utf-8").strip() if ns_file.exists() else None
        server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        info = ConnectionInfo(
            server=server,
            ca_path=str(sa_dir / "ca.crt"),
            scheme="Bearer",
            token=token,
            default_namespace=namespace,
        )
        return Loaded(info, reload_every=FILE_REFRESH_SECONDS)

    return load


# A kubeconfig's fields the quick reading below knows; any other (exec, auth-provider, tokenFile,
# client certificates, basic auth, extensions...) goes through the library.
_STATIC_USER = frozenset({"token"})
_STATIC_CLUSTER = frozenset(
    {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify",
     "tls-server-name", "proxy-url"}
)  # fmt: skip


def _json_or_yaml(text: str) -> Any:
    """A kubeconfig's document. JSON is YAML, and a kubeconfig written as JSON (as generated ones
    often are) is read without importing PyYAML, whose import is ~10 ms of the start (its reader
    compiles a large regular expression); anything else, or JSON that does not parse, goes to YAML."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass
    import yaml

    # CSafeLoader exists only when PyYAML was built with libyaml.
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _static_kubeconfig(path: str, context: str | None) -> Loaded | None:
    """One kubeconfig file whose user is a plain token (a ServiceAccount's or a static one), read
    without the library; None for anything else, which the library then loads (and explains).

    Why: importing the ``kubernetes`` package for its loaders was ~0.1 s of every start-up.
    """
    if os.pathsep in path:
        return None
    try:
        config = _json_or_yaml(Path(path).expanduser().read_text(encoding="utf-8"))
        name = context or config["current-context"]
        ctx = next(c["context"] for c in config["contexts"] if c["name"] == name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == ctx["user"])
    except Exception:  # missing, malformed, or a shape not read here: the library says why
        return None
    if not isinstance(user, dict) or not isinstance(cluster, dict) or not isinstance(ctx, dict):
        return None
    if set(user) != _STATIC_USER or not set(cluster) <= _STATIC_CLUSTER:
        return None
    token, server = user["token"], cluster.get("server")
    if not isinstance(token, str) or not token.strip() or not isinstance(server, str) or not server:
        return None
    ca_path = cluster.get("certificate-authority")
    if ca_path is not None:
        ca_path = str(Path(path).expanduser().parent / str(ca_path))
    insecure = cluster.get("insecure-skip-tls-verify") is True
    info = ConnectionInfo(
        server=server,
        ca_path=ca_path,
        ca_data=cluster.get("certificate-authority-data") if ca_path is None else None,
        insecure=True if insecure else None,
        scheme="Bearer",
        token=token.strip(),
        proxy_url=cluster.get("proxy-url") or None,
        default_namespace=ctx.get("namespace"),
    )
    return Loaded(info, tls_server_name=cluster.get("tls-server-name") or None)


def _loaded(source: Callable[[], Loaded]) -> Credentials:
    return Credentials(source(), source)


def from_kubeconfig(path: str | os.PathLike[str], context: str | None = None) -> Credentials:
    """Credentials from a kubeconfig (or a ``:``-separated list of them, merged as kubectl does)."""
    return _loaded(_kubeconfig_source(os.fspath(path), context))


def in_cluster(sa_dir: Path = SA_DIR) -> Credentials:
    """The pod's ServiceAccount: ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the mounted token and CA."""
    return _loaded(_in_cluster_source(sa_dir))


def load_credentials(kubeconfig: str | None = None, context: str | None = None) -> Credentials:
    """Explicit kubeconfig, else in-cluster service account, else ``$KUBECONFIG`` / ``~/.kube/config``.

    Raises :class:`LoginError` with a readable reason when nothing usable is found.
    """
    if kubeconfig:
        return from_kubeconfig(kubeconfig, context)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and (SA_DIR / "token").exists():
        return in_cluster()
    env = os.environ.get("KUBECONFIG")
    if env and any(Path(p).expanduser().exists() for p in env.split(os.pathsep) if p):
        return from_kubeconfig(env, context)
    default = Path("~/.kube/config").expanduser()
    if default.exists():
        return from_kubeconfig(default, context)
    raise LoginError("no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a cluster")
