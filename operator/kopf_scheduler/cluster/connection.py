"""Credentials for the apiserver, shared by Kopf (its login handler) and our own aiohttp client.

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
import contextlib
import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf

__all__ = ["Credentials", "Loaded", "from_kubeconfig", "in_cluster", "load_credentials"]

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


@dataclass(frozen=True)
class Loaded:
    """One load of the credentials: what both HTTP clients need, and when to load them again."""

    info: kopf.ConnectionInfo  # ``info.expiration``: when an exec/auth-provider credential expires
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
        info: kopf.ConnectionInfo | Loaded,
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
        except kopf.LoginError as exc:
            # Keep the old credential: the request goes out and fails visibly (401 -> ApiError),
            # and a request after RETRY_SECONDS tries again; a refresh failure never stops the scheduler.
            logger.error("Reloading the credentials failed: %s", exc)
            self._due = self._clock() + RETRY_SECONDS

    def connection_info(self) -> kopf.ConnectionInfo:
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
    except kopf.LoginError:
        raise
    except Exception as exc:  # ConfigException, OSError, KeyError, ... from a bad kubeconfig
        detail = "; ".join([*capture.messages, f"{type(exc).__name__}: {exc}"])
        raise kopf.LoginError(f"{where}: {detail}") from exc
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


def _info_from(config: Any, **extra: Any) -> kopf.ConnectionInfo:
    """A ``kubernetes.client.Configuration`` as Kopf's ConnectionInfo."""
    header = config.api_key.get("BearerToken") or config.api_key.get("authorization")
    scheme, token = _split_authorization(header)
    return kopf.ConnectionInfo(
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
        from kubernetes.client import Configuration
        from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

        with _library_errors(f"kubeconfig {paths}") as capture:
            merger = KubeConfigMerger(paths)
            if merger.config is None:
                raise kopf.LoginError(f"kubeconfig {paths}: no such file")

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
                raise kopf.LoginError(f"kubeconfig {paths}: the {kind} gave no credential: {why}")
            if not config.host:
                raise kopf.LoginError(f"kubeconfig {paths}: the cluster has no server")
            context_node = loader.current_context.get("context") or {}
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
    def load() -> Loaded:
        from kubernetes.client import Configuration
        from kubernetes.config.incluster_config import InClusterConfigLoader

        with _library_errors("in-cluster service account"):
            config = Configuration()
            InClusterConfigLoader(
                token_filename=str(sa_dir / "token"),
                cert_filename=str(sa_dir / "ca.crt"),
                try_refresh_token=False,
            ).load_and_set(config)
            ns_file = sa_dir / "namespace"
            namespace = ns_file.read_text(encoding="utf-8").strip() if ns_file.exists() else None
            info = _info_from(config, default_namespace=namespace)
        return Loaded(info, reload_every=FILE_REFRESH_SECONDS)

    return load


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

    Raises :class:`kopf.LoginError` with a readable reason when nothing usable is found.
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
    raise kopf.LoginError("no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a cluster")
