"""Credentials for the apiserver, shared by Kopf (its login handler) and our own aiohttp client.

We load the kubeconfig (or the in-cluster service account) ourselves instead of piggybacking on a
client library: Kopf's piggybacking goes through the ``kubernetes`` library's global default
configuration (no explicit ``--kubeconfig`` path, and it cannot be pointed at a second cluster in
the same process, which the tests do), while Kopf's own minimal kubeconfig login reads only
``$KUBECONFIG``. The result is a :class:`kopf.ConnectionInfo`, so the same object feeds Kopf's
``on.login`` handler and our session, and Kopf's ``as_ssl_context``/``as_http_headers`` build both.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf
import yaml

__all__ = ["Credentials", "load_credentials"]

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class Credentials:
    """A ConnectionInfo plus, for rotating service-account tokens, the file to re-read the token from.

    Bound service-account tokens expire (about an hour); the kubelet rewrites the file, so the
    Authorization header is re-read from it at most every ``refresh`` seconds.
    """

    def __init__(
        self, info: kopf.ConnectionInfo, token_file: str | None = None, refresh: float = 60.0
    ) -> None:
        self.info = info
        self.token_file = token_file
        self.refresh = refresh
        self._headers = info.as_http_headers()
        self._read_at = time.monotonic()

    @property
    def server(self) -> str:
        return self.info.server.rstrip("/")

    def headers(self) -> dict[str, str]:
        if self.token_file and time.monotonic() - self._read_at > self.refresh:
            self.reload()
        return self._headers

    def reload(self) -> None:
        """Re-read the token file (after a 401 or when the refresh period has passed)."""
        self._read_at = time.monotonic()
        if self.token_file:
            token = Path(self.token_file).read_text(encoding="utf-8").strip()
            self._headers = {"Authorization": f"Bearer {token}"}

    def connection_info(self) -> kopf.ConnectionInfo:
        """The info with the current token, for Kopf's login handler."""
        if not self.token_file:
            return self.info
        self.reload()
        token = self._headers["Authorization"].split(" ", 1)[1]
        fields = {f: getattr(self.info, f) for f in self.info.__dataclass_fields__}
        fields["token"] = token
        return kopf.ConnectionInfo(**fields)


def _resolve(base: Path, path: str | None) -> str | None:
    if not path:
        return None
    p = Path(os.path.expanduser(path))
    return str(p if p.is_absolute() else base / p)


def _named(items: Any, what: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for item in items or ():
        out.setdefault(str(item["name"]), item.get(what) or {})
    return out


def from_kubeconfig(path: str | os.PathLike[str], context: str | None = None) -> Credentials:
    """Parse a kubeconfig file: token, tokenFile, client certificates, basic auth; no exec plugins."""
    path = Path(path).expanduser()
    config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    base = path.parent
    name = context or config.get("current-context")
    if not name:
        raise kopf.LoginError(f"{path}: no current-context")
    contexts = _named(config.get("contexts"), "context")
    if name not in contexts:
        raise kopf.LoginError(f"{path}: context {name!r} not found")
    ctx = contexts[name]
    cluster = _named(config.get("clusters"), "cluster").get(str(ctx.get("cluster")), {})
    user = _named(config.get("users"), "user").get(str(ctx.get("user")), {})
    if user.get("exec") or user.get("auth-provider"):
        raise kopf.LoginError(f"{path}: exec/auth-provider credentials are not supported; use a token")
    token_file = _resolve(base, user.get("tokenFile"))
    token = user.get("token")
    if token_file and not token:
        token = Path(token_file).read_text(encoding="utf-8").strip()
    info = kopf.ConnectionInfo(
        server=str(cluster.get("server", "")),
        ca_path=_resolve(base, cluster.get("certificate-authority")),
        ca_data=cluster.get("certificate-authority-data"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")) or None,
        certificate_path=_resolve(base, user.get("client-certificate")),
        certificate_data=user.get("client-certificate-data"),
        private_key_path=_resolve(base, user.get("client-key")),
        private_key_data=user.get("client-key-data"),
        username=user.get("username"),
        password=user.get("password"),
        token=token,
        default_namespace=ctx.get("namespace"),
        proxy_url=cluster.get("proxy-url"),
    )
    return Credentials(info, token_file=token_file)


def in_cluster(sa_dir: Path = SA_DIR) -> Credentials:
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    token_file = sa_dir / "token"
    ns_file = sa_dir / "namespace"
    ca = sa_dir / "ca.crt"
    info = kopf.ConnectionInfo(
        server=f"https://{host}:{port}",
        ca_path=str(ca) if ca.exists() else None,
        token=token_file.read_text(encoding="utf-8").strip(),
        default_namespace=ns_file.read_text(encoding="utf-8").strip() if ns_file.exists() else None,
    )
    return Credentials(info, token_file=str(token_file))


def load_credentials(kubeconfig: str | None = None, context: str | None = None) -> Credentials:
    """Explicit kubeconfig, else in-cluster service account, else ``$KUBECONFIG`` / ``~/.kube/config``."""
    if kubeconfig:
        return from_kubeconfig(kubeconfig, context)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and (SA_DIR / "token").exists():
        return in_cluster()
    env = os.environ.get("KUBECONFIG")
    if env:
        first = next((p for p in env.split(os.pathsep) if p), None)
        if first:
            return from_kubeconfig(first, context)
    default = Path("~/.kube/config").expanduser()
    if default.exists():
        return from_kubeconfig(default, context)
    raise kopf.LoginError("no kubeconfig and not in a cluster")
