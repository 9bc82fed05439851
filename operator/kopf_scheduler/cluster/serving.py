"""Secure serving as kube-scheduler v1.37.2 has it: HTTPS on ``--secure-port`` (10259) with delegated
authentication and authorization, serving ``/metrics``, ``/metrics/resources``, ``/configz``,
``/healthz``, ``/livez`` and ``/readyz``.

What the reference does (``cmd/kube-scheduler/app``, apiserver's ``SecureServingOptions``,
``DelegatingAuthenticationOptions``, ``DelegatingAuthorizationOptions``) and so do we:

- The certificate is ``--tls-cert-file``/``--tls-private-key-file`` (re-read when the files change),
  else ``<--cert-dir>/kube-scheduler.{crt,key}`` (generated there when absent), else a self-signed
  pair generated in memory at start: a CA ``localhost-ca@<unix time>`` and a serving certificate
  ``localhost@<unix time>`` for ``localhost`` and 127.0.0.1 (and the bind address when it is not
  unspecified), RSA 2048, valid for a year from an hour ago (``certutil.GenerateSelfSignedCertKey``).
- Every request is authenticated, then authorized, then routed (``buildHandlerChain``):

  * a client certificate verified against the cluster's client CA (``--client-ca-file``, else the
    ``client-ca-file`` of ConfigMap ``kube-system/extension-apiserver-authentication``, re-read every
    minute) is user CN in groups O;
  * else a bearer token is reviewed by the apiserver (a TokenReview, answers cached for
    ``--authentication-token-webhook-cache-ttl``, 10 s, allowed or not);
  * a token that does not pass is a 401; no credentials at all is ``system:anonymous``;
  * users in ``system:masters`` are allowed, then the ``--authorization-always-allow-paths``
    (``/healthz``, ``/readyz``, ``/livez``; a trailing ``*`` matches a prefix), then a
    SubjectAccessReview of the non-resource URL with the request's verb (``get`` for GET; allowed
    answers cached 10 s, denied ones 10 s); a denial is the reference's 403 Status,
    ``forbidden: User "system:anonymous" cannot get path "/metrics"``, and a review that cannot be
    made is a 500. Every path is a non-resource URL: the reference's request-info factory has no API
    prefixes, so ``/api/v1/pods`` is a path like any other.

- The reviews go out with ``--authentication-kubeconfig``/``--authorization-kubeconfig``, else the
  in-cluster ServiceAccount (the Deployment's: it needs ``system:auth-delegator`` and, for the client
  CA, ``extension-apiserver-authentication-reader`` in kube-system); outside a cluster without those
  flags, as in the reference, tokens are not reviewed (everyone is anonymous) and only the always
  allowed paths answer.
- ``/healthz`` lists ``leaderElection`` (when electing; else ``ping``), ``/readyz`` lists
  ``leaderElection``, ``shutdown`` and ``sched-handler-sync`` (the informers' first listing), in the
  reference's format (``ok``; ``?verbose``, ``?exclude=``, ``/healthz/<check>``). Ours add the
  operator's own liveness checks to ``/healthz`` and ``/livez``: ``event-loop`` (stuck for 30 s),
  ``tasks`` and ``supervised``. ``/metrics/resources`` answers 200 with an empty body on a replica
  that does not lead, as the reference's handler does.

Where we differ, on purpose: a client certificate that does not verify fails the TLS handshake
(Python's ``ssl`` cannot request a certificate without verifying it) where the reference answers
401; the front-proxy request-header authentication (``--requestheader-*``) is not implemented; at
most ``workers - 1`` reviews are in flight, a request that would need one more gets a 429 at once,
so the last worker is always free for the kubelet's probes (an unreachable apiserver makes a review
last up to 5 tries of 10 s); ``DELETE /metrics`` (the reference resets its metrics) is a 405.

The server is the metrics server's design (``httpd.HealthServer``): a few threads, a connection
parked until it is ready, idle connections closed after 5 s. Here the TLS handshake runs in the
parker, step by step on a non-blocking socket, so a client that stalls mid-handshake holds no thread.
TLS is Python's ``ssl`` (OpenSSL); the certificates are made with ``cryptography`` (pyca), which
the standard library cannot do.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import ipaddress
import json
import logging
import os
import random
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kopf_scheduler.cluster import resource_metrics
from kopf_scheduler.cluster.connection import SA_DIR, Credentials, LoginError, from_kubeconfig, in_cluster
from kopf_scheduler.cluster.metrics import IDLE_TIMEOUT, WORKERS, Health

if TYPE_CHECKING:  # the server's machinery (httpd.py) is imported when the server starts: see there
    from http.server import BaseHTTPRequestHandler

    from prometheus_client import CollectorRegistry

    from kopf_scheduler.cluster.httpd import SecureServer

__all__ = [
    "DEFAULT_ALWAYS_ALLOW_PATHS",
    "DEFAULT_SECURE_PORT",
    "AuthOptions",
    "Authenticator",
    "Authorizer",
    "Endpoints",
    "SecureServing",
    "ServingError",
    "ServingOptions",
    "UserInfo",
    "configz_document",
    "generate_self_signed",
    "prepare",
]

log = logging.getLogger(__name__)

DEFAULT_SECURE_PORT = 10259  # kubeschedulerconfig.DefaultKubeSchedulerPort
DEFAULT_ALWAYS_ALLOW_PATHS = ("/healthz", "/readyz", "/livez")
PAIR_NAME = "kube-scheduler"
CACHE_SIZE = 8192  # answers kept at most per cache (the reference's authorizer LRU holds 8192)
CERT_CHECK_SECONDS = 10.0  # certificate files are stat()ed at most this often (on new connections)
CLIENT_CA_REFRESH_SECONDS = 60.0
AUTH_CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
ANONYMOUS_USER = "system:anonymous"
UNAUTHENTICATED = "system:unauthenticated"
AUTHENTICATED = "system:authenticated"
TLS_VERSIONS = {
    "VersionTLS10": ssl.TLSVersion.TLSv1,
    "VersionTLS11": ssl.TLSVersion.TLSv1_1,
    "VersionTLS12": ssl.TLSVersion.TLSv1_2,
    "VersionTLS13": ssl.TLSVersion.TLSv1_3,
}


class ServingError(Exception):
    """Secure serving cannot start; the message is the reference's where it has one (exit 1)."""


class Busy(Exception):
    """Every review slot is taken: answered 429 at once, so the probes always find a thread."""


class ReviewError(Exception):
    """A TokenReview or SubjectAccessReview could not be made."""


# --- options --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServingOptions:
    """``--bind-address``, ``--secure-port``, ``--cert-dir``, ``--tls-*`` (SecureServingOptions)."""

    bind_address: str = "0.0.0.0"
    port: int = DEFAULT_SECURE_PORT
    cert_dir: str = ""
    cert_file: str = ""
    key_file: str = ""
    min_tls_version: str = ""


@dataclass(frozen=True)
class AuthOptions:
    """The delegated authentication and authorization flags, with the reference's defaults."""

    authentication_kubeconfig: str = ""
    authorization_kubeconfig: str = ""
    token_cache_ttl: float = 10.0
    allow_cache_ttl: float = 10.0
    deny_cache_ttl: float = 10.0
    always_allow_paths: tuple[str, ...] = DEFAULT_ALWAYS_ALLOW_PATHS
    always_allow_groups: tuple[str, ...] = ("system:masters",)
    client_ca_file: str = ""
    skip_lookup: bool = False
    request_timeout: float = 10.0


# --- certificates ---------------------------------------------------------------------------------


def _key_usage(*, cert_sign: bool) -> Any:
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=True,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )


def generate_self_signed(
    host: str, alternate_ips: Sequence[str] = (), alternate_dns: Sequence[str] = ()
) -> tuple[bytes, bytes]:
    """``certutil.GenerateSelfSignedCertKey``: (certificate then CA, PEM; the key, PKCS#1 PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    valid_from = now - dt.timedelta(hours=1)  # an hour early: clock skew
    valid_to = valid_from + dt.timedelta(days=365)
    stamp = int(now.timestamp())

    def serial() -> int:
        return random.SystemRandom().randrange(1, 2**63 - 1)

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}-ca@{stamp}")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(serial())
        .not_valid_before(valid_from)
        .not_valid_after(valid_to)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ips: list[x509.GeneralName] = []
    dns: list[x509.GeneralName] = []
    try:
        ips.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        dns.append(x509.DNSName(host))
    ips += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in alternate_ips]
    dns += [x509.DNSName(name) for name in alternate_dns]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{stamp}")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(serial())
        .not_valid_before(valid_from)
        .not_valid_after(valid_to)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .add_extension(x509.SubjectAlternativeName(dns + ips), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,  # "RSA PRIVATE KEY", as keyutil writes it
        serialization.NoEncryption(),
    )
    return pem, key_pem


def _load_chain(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """``load_cert_chain`` from bytes: ``ssl`` reads only files, so the key goes through a memfd
    (never on a disk), or a private temporary directory where there is none."""
    if hasattr(os, "memfd_create"):  # the platform's: os has it on Linux only
        fds = [os.memfd_create("kopf-scheduler-serving", 0) for _ in range(2)]
        try:
            for fd, data in zip(fds, (cert_pem, key_pem), strict=True):
                os.write(fd, data)
            context.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
            return
        except FileNotFoundError:  # no /proc: fall through
            pass
        finally:
            for fd in fds:
                os.close(fd)
    with tempfile.TemporaryDirectory(prefix="kopf-scheduler-serving-") as tmp:
        cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        cert.write_bytes(cert_pem)
        key.touch(0o600)
        key.write_bytes(key_pem)
        context.load_cert_chain(str(cert), str(key))


class ServingCertificate:
    """The serving pair: fixed bytes (generated, possibly still being generated), or files that are
    re-read when they change (``NewDynamicServingContentFromFiles``)."""

    def __init__(
        self,
        *,
        files: tuple[str, str] | None = None,
        pair: Future[tuple[bytes, bytes]] | Callable[[], Future[tuple[bytes, bytes]]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.files = files
        self._pair = pair  # the pair, or what starts making it (``begin``)
        self._clock = clock
        self._stamp: tuple[Any, ...] = ()
        self._checked = -float("inf")
        self._material: tuple[bytes, bytes] | None = None
        self.version = 0
        if files is not None:
            self.refresh(force=True)

    def _file_stamp(self) -> tuple[Any, ...]:
        assert self.files is not None
        out: list[Any] = []
        for path in self.files:
            st = os.stat(path)
            out += [st.st_mtime_ns, st.st_size, st.st_ino]
        return tuple(out)

    def refresh(self, *, force: bool = False) -> None:
        """Files: re-read when changed (at most every CERT_CHECK_SECONDS unless forced).
        Raises ServingError when forced (at start); later failures keep the pair in use."""
        if self.files is None:
            return
        now = self._clock()
        if not force and now - self._checked < CERT_CHECK_SECONDS:
            return
        self._checked = now
        try:
            stamp = self._file_stamp()
            if stamp == self._stamp:
                return
            cert_pem, key_pem = (Path(p).read_bytes() for p in self.files)
            _load_chain(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cert_pem, key_pem)  # both usable
        except (OSError, ValueError) as exc:
            why = f"failed to load the serving certificate {self.files[0]}, {self.files[1]}: {exc}"
            if force:
                raise ServingError(why) from None
            log.error("%s; serving the previous one", why)
            return
        self._stamp, self._material = stamp, (cert_pem, key_pem)
        self.version += 1
        if not force:
            log.info("Serving certificate reloaded from %s", self.files[0])

    def begin(self) -> None:
        """Start generating the pair, if that is what is served and not started yet."""
        if callable(self._pair):
            self._pair = self._pair()

    def material(self) -> tuple[bytes, bytes]:
        if self._material is None:
            self.begin()
            assert isinstance(self._pair, Future)
            self._material = self._pair.result()
            self.version += 1
        return self._material


def _pair_in_background(host: str, ips: Sequence[str], dns: Sequence[str]) -> Future[tuple[bytes, bytes]]:
    """Generate while the operator starts: RSA key generation releases the GIL (~35 ms a key)."""
    future: Future[tuple[bytes, bytes]] = Future()

    def run() -> None:
        try:
            future.set_result(generate_self_signed(host, ips, dns))
        except BaseException as exc:  # pragma: no cover - cryptography failing
            future.set_exception(exc)

    threading.Thread(target=run, name="kopf-scheduler-selfsigned", daemon=True).start()
    return future


def _self_signed_names(bind_address: str) -> tuple[list[str], list[str]]:
    """``MaybeDefaultWithSelfSignedCerts("localhost", nil, [127.0.0.1])``' alternate names."""
    ips, dns = ["127.0.0.1"], []
    if ipaddress.ip_address(bind_address or "0.0.0.0").is_unspecified:
        dns.append("localhost")
    else:
        ips.append(bind_address)
    return ips, dns


def serving_certificate(opts: ServingOptions) -> ServingCertificate:
    """``MaybeDefaultWithSelfSignedCerts``, then ``ApplyTo``: the pair to serve."""
    if opts.cert_file or opts.key_file:
        return ServingCertificate(files=(opts.cert_file, opts.key_file))
    ips, dns = _self_signed_names(opts.bind_address)
    if opts.cert_dir:
        cert = Path(opts.cert_dir, f"{PAIR_NAME}.crt")
        key = Path(opts.cert_dir, f"{PAIR_NAME}.key")
        readable = all(os.access(p, os.R_OK) for p in (cert, key))
        if not readable:
            cert_pem, key_pem = generate_self_signed("localhost", ips, dns)
            try:
                cert.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                cert.write_bytes(cert_pem)
                cert.chmod(0o644)
                key.touch(0o600)
                key.write_bytes(key_pem)
            except OSError as exc:
                raise ServingError(f"unable to write the self-signed certificate: {exc}") from None
            log.info("Generated self-signed cert (%s, %s)", cert, key)
        return ServingCertificate(files=(str(cert), str(key)))
    log.info("Generating a self-signed cert in-memory")
    # Begun when serving starts: cryptography's import holds the GIL (~35 ms) and the keys cost
    # ~70 ms of CPU; by then the operator's own start-up work is done (measured: +80 ms to /readyz
    # when begun here, in prepare()).
    return ServingCertificate(pair=lambda: _pair_in_background("localhost", ips, dns))


# --- the apiserver, for reviews (blocking: called from the server's threads) ----------------------


class ReviewBudget:
    """Reviews in flight at once, shared by authentication and authorization."""

    def __init__(self, slots: int) -> None:
        self._slots = threading.BoundedSemaphore(max(1, slots))

    @contextlib.contextmanager
    def slot(self) -> Any:
        if not self._slots.acquire(blocking=False):
            raise Busy()
        try:
            yield
        finally:
            self._slots.release()


class ReviewClient:
    """POSTs reviews (and reads the client CA) as ``credentials``, retrying as the reference's
    webhooks do (``DefaultAuthWebhookRetryBackoff``: 5 tries, 0.5 s growing 1.5x, jitter 0.2) on a
    reset connection, 429, 500, 504 or a Retry-After; a 401 reloads the credentials once."""

    STEPS = 5

    def __init__(
        self,
        credentials: Credentials,
        *,
        timeout: float = 10.0,
        budget: ReviewBudget | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.credentials = credentials
        self.timeout = timeout
        self.budget = budget or ReviewBudget(WORKERS - 1)
        self._sleep = sleep
        self._context: tuple[tuple[Any, ...], ssl.SSLContext] | None = None

    def _ssl(self) -> ssl.SSLContext:
        material = self.credentials.tls_material
        if self._context is None or self._context[0] != material:
            self._context = (material, self.credentials.info.as_ssl_context())
        return self._context[1]

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with self.budget.slot():
            return self._retrying("POST", path, json.dumps(body).encode())

    def get(self, path: str) -> dict[str, Any]:
        with self.budget.slot():
            return self._retrying("GET", path, None)

    def _retrying(self, method: str, path: str, body: bytes | None) -> dict[str, Any]:
        delay = 0.5
        for step in range(self.STEPS):
            try:
                return self._once(method, path, body)
            except _Transient as exc:
                if step == self.STEPS - 1:
                    raise ReviewError(str(exc)) from None
                self._sleep(delay * (1 + random.random() * 0.2))
                delay *= 1.5
        raise AssertionError("unreachable")  # pragma: no cover

    def _once(self, method: str, path: str, body: bytes | None, *, reloaded: bool = False) -> dict[str, Any]:
        creds = self.credentials
        if creds.stale():
            with contextlib.suppress(LoginError):
                creds.reload(unless_newer_than=creds.loaded)
        used = creds.loaded
        url = urllib.parse.urlsplit(creds.server)
        target = url.path.rstrip("/") + path + ("?timeout=10s" if method == "POST" else "")
        where = f'{method.title()} "{creds.server}{path}"'
        from kopf_scheduler.cluster.httpd import ReviewConnection  # http.client: see httpd.py

        conn = ReviewConnection(
            url.hostname or "", url.port or 443, self.timeout, self._ssl(), creds.tls_server_name
        )
        try:
            headers = {
                **used.info.as_http_headers(),
                "Accept": "application/json",
                "User-Agent": "kopf-scheduler/secure-serving",
            }
            if body is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except ConnectionResetError as exc:
            raise _Transient(f"{where}: {exc.strerror or exc}") from None
        except (OSError, ValueError) as exc:
            strerror = exc.strerror if isinstance(exc, OSError) else None
            raise ReviewError(f"{where}: {strerror or exc}") from None
        finally:
            conn.close()
        if resp.status == 401 and not reloaded:
            with contextlib.suppress(LoginError):
                creds.reload(unless_newer_than=used)
            if creds.loaded is not used:
                return self._once(method, path, body, reloaded=True)
        if 200 <= resp.status < 300:
            try:
                answer = json.loads(data)
            except ValueError:
                raise ReviewError(f"{where}: an answer that is not JSON") from None
            if not isinstance(answer, dict):
                raise ReviewError(f"{where}: an answer that is not an object")
            return answer
        try:
            message = str(json.loads(data).get("message") or "")
        except (ValueError, AttributeError):
            message = ""
        message = message or (
            f"the server responded with the status code {resp.status} but did not return more information"
        )
        if resp.status in (429, 500, 504) or resp.getheader("Retry-After"):
            raise _Transient(message)
        raise ReviewError(message)


class _Transient(Exception):
    pass


def _credentials(kubeconfig: str, what: str) -> Credentials | None:
    """``getClient``: the kubeconfig given, else in-cluster, else None (optional, as the scheduler's)."""
    if kubeconfig:
        try:
            return from_kubeconfig(kubeconfig)
        except LoginError as exc:
            raise ServingError(f"failed to get delegated {what} kubeconfig: {exc}") from None
    if os.environ.get("KUBERNETES_SERVICE_HOST") and (SA_DIR / "token").exists():
        try:
            return in_cluster()
        except LoginError as exc:
            log.warning("failed to read in-cluster kubeconfig for delegated %s: %s", what, exc)
    return None


# --- authentication -------------------------------------------------------------------------------


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


ANONYMOUS = UserInfo(ANONYMOUS_USER, groups=(UNAUTHENTICATED,))


class Unauthenticated(Exception):
    """Credentials were given and did not pass: a 401."""


class _TTLCache:
    """Answers with their own expiry, oldest out first past ``size`` (thread-safe)."""

    def __init__(self, size: int = CACHE_SIZE, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self.clock = clock
        self._items: OrderedDict[str, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Any:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            if hit[0] <= self.clock():
                del self._items[key]
                return None
            return hit[1]

    def put(self, key: str, value: Any, ttl: float) -> None:
        if ttl <= 0:
            return
        with self._lock:
            self._items[key] = (self.clock() + ttl, value)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


def _with_authenticated(user: UserInfo) -> UserInfo:
    """``AuthenticatedGroupAdder``."""
    if user.name == ANONYMOUS_USER or AUTHENTICATED in user.groups or UNAUTHENTICATED in user.groups:
        return user
    return UserInfo(user.name, user.uid, (*user.groups, AUTHENTICATED), user.extra)


def _bearer(header: str | None) -> str | None:
    """``bearertoken.Authenticator``: the token of ``Authorization: Bearer <token>``, if any."""
    auth = (header or "").strip()
    if not auth:
        return None
    parts = auth.split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def _certificate_user(peer: Mapping[str, Any] | None) -> UserInfo | None:
    """``x509.CommonNameUserConversion``: CN is the user, each O a group (a verified certificate)."""
    if not peer:
        return None
    common_name = ""
    organizations: list[str] = []
    for rdn in peer.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                common_name = value
            elif key == "organizationName":
                organizations.append(value)
    if not common_name:
        return None
    return UserInfo(common_name, groups=tuple(organizations))


class Authenticator:
    """The reference's delegating authenticator: client certificate, then bearer token (reviewed),
    then anonymous. ``reviews`` None: tokens are not reviewed; with no client CA either, every
    request is anonymous (as the reference's when it has no authentication kubeconfig)."""

    def __init__(
        self,
        reviews: ReviewClient | None,
        *,
        client_certificates: bool,
        ttl: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reviews = reviews
        self.client_certificates = client_certificates
        self.ttl = ttl
        self.cache = _TTLCache(clock=clock)

    def authenticate(self, authorization: str | None, peer: Mapping[str, Any] | None) -> UserInfo:
        """The request's user; raises Unauthenticated (401) or Busy (429)."""
        if self.reviews is None and not self.client_certificates:
            return ANONYMOUS
        if self.client_certificates:
            user = _certificate_user(peer)
            if user is not None:
                return _with_authenticated(user)
        token = _bearer(authorization) if self.reviews is not None else None
        if token is None:
            return ANONYMOUS
        return _with_authenticated(self._token(token))

    def _token(self, token: str) -> UserInfo:
        assert self.reviews is not None
        key = hashlib.sha256(token.encode()).hexdigest()
        hit = self.cache.get(key)
        if hit is None:
            body = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            }
            try:
                status = self.reviews.create(TOKEN_REVIEWS, body).get("status") or {}
            except ReviewError as exc:  # not cached: the next request asks again
                log.error("Unable to authenticate the request: %s", exc)
                raise Unauthenticated(str(exc)) from None
            if status.get("authenticated"):
                raw = status.get("user") or {}
                hit = UserInfo(
                    str(raw.get("username") or ""),
                    str(raw.get("uid") or ""),
                    tuple(str(g) for g in raw.get("groups") or ()),
                    {str(k): tuple(str(x) for x in v or ()) for k, v in (raw.get("extra") or {}).items()},
                )
            else:
                hit = str(status.get("error") or "invalid bearer token")
            self.cache.put(key, hit, self.ttl)
        if isinstance(hit, str):
            raise Unauthenticated(hit)
        return hit


# --- authorization --------------------------------------------------------------------------------

ALLOW, DENY, NO_OPINION = "allow", "deny", "no-opinion"


@dataclass(frozen=True)
class Attributes:
    """What is authorized: every path here is a non-resource URL (see the module docstring)."""

    user: UserInfo
    verb: str
    path: str


def path_rules(paths: Iterable[str]) -> tuple[frozenset[str], tuple[str, ...]]:
    """``path.NewAuthorizer``'s rules: exact paths and prefixes (a trailing ``*``), no leading ``/``."""
    exact: set[str] = set()
    prefixes: list[str] = []
    for raw in paths:
        p = raw.removeprefix("/")
        if not p:
            exact.add(p)
            continue
        if "*" in p[:-1]:
            raise ServingError(f"only trailing * allowed in {json.dumps(p)}")
        if p.endswith("*"):
            prefixes.append(p[:-1])
        else:
            exact.add(p)
    return frozenset(exact), tuple(prefixes)


class Authorizer:
    """The reference's union: privileged groups, always-allowed paths, then the SubjectAccessReview
    (``reviews`` None: none, so anything else is forbidden). Returns (decision, reason, error)."""

    def __init__(
        self,
        reviews: ReviewClient | None,
        *,
        always_allow_paths: Iterable[str] = DEFAULT_ALWAYS_ALLOW_PATHS,
        always_allow_groups: Iterable[str] = ("system:masters",),
        allow_ttl: float = 10.0,
        deny_ttl: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reviews = reviews
        self.paths, self.prefixes = path_rules(always_allow_paths)
        self.groups = frozenset(always_allow_groups)
        self.allow_ttl = allow_ttl
        self.deny_ttl = deny_ttl
        self.cache = _TTLCache(clock=clock)

    def authorize(self, attrs: Attributes) -> tuple[str, str, str | None]:
        if self.groups.intersection(attrs.user.groups):
            return ALLOW, "", None
        path = attrs.path.removeprefix("/")
        if path in self.paths or any(path.startswith(p) for p in self.prefixes):
            return ALLOW, "", None
        if self.reviews is None:
            return NO_OPINION, "", None
        return self._review(attrs)

    def _review(self, attrs: Attributes) -> tuple[str, str, str | None]:
        assert self.reviews is not None
        user = attrs.user
        spec: dict[str, Any] = {"nonResourceAttributes": {"path": attrs.path, "verb": attrs.verb}}
        spec["user"] = user.name
        if user.groups:
            spec["groups"] = list(user.groups)
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        if user.uid:
            spec["uid"] = user.uid
        key = json.dumps(spec, sort_keys=True)
        status = self.cache.get(key)
        if status is None:
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
            try:
                status = self.reviews.create(SUBJECT_ACCESS_REVIEWS, body).get("status") or {}
            except ReviewError as exc:
                log.error("Failed to make webhook authorizer request: %s", exc)
                return NO_OPINION, "", str(exc)
            ttl = self.allow_ttl if status.get("allowed") else self.deny_ttl
            log.debug("SubjectAccessReview of %s %s for %s: %s", attrs.verb, attrs.path, user.name, status)
            self.cache.put(key, status, ttl)
        reason = str(status.get("reason") or "")
        allowed, denied = bool(status.get("allowed")), bool(status.get("denied"))
        if allowed and denied:
            return DENY, reason, "webhook subject access review returned both allow and deny response"
        if denied:
            return DENY, reason, None
        if allowed:
            return ALLOW, reason, None
        return NO_OPINION, reason, None


class ClientCA:
    """The CA bundle client certificates are verified against: ``--client-ca-file`` (re-read when it
    changes), else the cluster's, from ConfigMap kube-system/extension-apiserver-authentication
    (``client-ca-file``), read every minute by :meth:`run`."""

    def __init__(self, *, file: str = "", reader: ReviewClient | None = None) -> None:
        self.file = file
        self.reader = reader
        self.pem: bytes | None = None
        self.version = 0
        self._stamp: Any = None
        self._warned = False
        self.stop = threading.Event()

    def refresh(self) -> None:
        pem: bytes | None
        if self.file:
            try:
                st = os.stat(self.file)
                stamp: Any = (st.st_mtime_ns, st.st_size)
                if stamp == self._stamp:
                    return
                pem = Path(self.file).read_bytes()
                ssl.create_default_context(cadata=pem.decode())
            except (OSError, ValueError) as exc:
                log.error("unable to load the client CA file %s: %s", self.file, exc)
                return
        elif self.reader is not None:
            try:
                data = self.reader.get(AUTH_CONFIGMAP).get("data") or {}
            except (ReviewError, Busy) as exc:
                if not self._warned:
                    log.warning("unable to load configmap based client CA file: %s", exc)
                    self._warned = True
                return
            text = data.get("client-ca-file")
            pem = text.encode() if text else None
            stamp = pem
            if pem is not None:
                try:
                    ssl.create_default_context(cadata=pem.decode())
                except (ssl.SSLError, ValueError) as exc:
                    log.error("the cluster's client-ca-file is unusable: %s", exc)
                    return
            if stamp == self._stamp:
                return
        else:
            return
        self._stamp, self.pem = stamp, pem
        self.version += 1

    def run(self) -> None:
        while not self.stop.wait(CLIENT_CA_REFRESH_SECONDS):
            self.refresh()


# --- what is served -------------------------------------------------------------------------------


def _go_json(value: Any) -> bytes:
    """JSON as Go's encoding/json writes it: compact, ``<``, ``>`` and ``&`` escaped, whole floats
    without a fraction."""

    def fix(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
            return int(v)
        if isinstance(v, Mapping):
            return {k: fix(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [fix(x) for x in v]
        return v

    text = json.dumps(fix(value), separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode()


def _ordered(mapping: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    out = {k: mapping[k] for k in order if k in mapping}
    out.update((k, v) for k, v in mapping.items() if k not in out)
    return out


_CONFIG_ORDER = (
    "kind", "apiVersion", "parallelism", "leaderElection", "clientConnection", "enableProfiling",
    "enableContentionProfiling", "percentageOfNodesToScore", "podInitialBackoffSeconds",
    "podMaxBackoffSeconds", "profiles", "extenders", "delayCacheUntilActive",
)  # fmt: skip
_LEADER_ORDER = (
    "leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock", "resourceName",
    "resourceNamespace",
)  # fmt: skip
_CONNECTION_ORDER = ("kubeconfig", "acceptContentTypes", "contentType", "qps", "burst")


def configz_document(
    document: Mapping[str, Any], *, leader_elect: bool | None = None, resource_name: str | None = None
) -> dict[str, Any]:
    """What the reference's ``/configz`` holds under ``componentconfig``: the defaulted v1
    KubeSchedulerConfiguration converted from its internal form (every extension point present,
    weights 0 where unset, each plugin's args with their kind). ``leader_elect``/``resource_name``:
    the election in force (``--standalone``, the peering's name), which ours may take from flags."""
    from kopf_scheduler.config.kubescheduler import API_VERSION, KIND, PLUGIN_POINTS

    doc = dict(document)
    out: dict[str, Any] = {"kind": KIND, "apiVersion": API_VERSION}
    out.update((k, v) for k, v in doc.items() if k not in ("kind", "apiVersion"))
    leader = dict(out.get("leaderElection") or {})
    if leader_elect is not None:
        leader["leaderElect"] = leader_elect
    if resource_name is not None:
        leader["resourceName"] = resource_name
    out["leaderElection"] = _ordered(leader, _LEADER_ORDER)
    out["clientConnection"] = _ordered(dict(out.get("clientConnection") or {}), _CONNECTION_ORDER)
    if not out.get("delayCacheUntilActive"):
        out.pop("delayCacheUntilActive", None)
    if not out.get("extenders"):
        out.pop("extenders", None)
    profiles = []
    for prof in out.get("profiles") or ():
        given = prof.get("plugins") or {}
        plugins = {
            point: {
                key: [{"name": p.get("name", ""), "weight": p.get("weight") or 0} for p in pset[key]]
                for key in ("enabled", "disabled")
                if pset.get(key)
            }
            for point in (*PLUGIN_POINTS, *(p for p in given if p not in PLUGIN_POINTS))
            for pset in (given.get(point) or {},)
        }
        configs = [
            {
                "name": pc.get("name"),
                "args": {
                    "kind": f"{pc.get('name')}Args",
                    "apiVersion": API_VERSION,
                    **(pc.get("args") or {}),
                },
            }
            for pc in prof.get("pluginConfig") or ()
        ]
        entry: dict[str, Any] = {"schedulerName": prof.get("schedulerName") or ""}
        if prof.get("percentageOfNodesToScore") is not None:
            entry["percentageOfNodesToScore"] = prof["percentageOfNodesToScore"]
        entry["plugins"] = plugins
        if configs:
            entry["pluginConfig"] = configs
        profiles.append(entry)
    out["profiles"] = profiles
    return _ordered(out, _CONFIG_ORDER)


@dataclass
class Endpoints:
    """What the secure port reads from the running scheduler (from the server's threads)."""

    health: Health
    pods: Callable[[], Iterable[Mapping[str, Any]]] = lambda: ()  # the informer's pods, raw
    is_leader: Callable[[], bool] = lambda: True  # /metrics/resources is served only then
    configz: Mapping[str, Any] | None = None
    # kube-scheduler's leader-election watchdog; None when not electing (then /healthz has ping).
    leader_election: Callable[[], str | None] | None = None
    synced: Callable[[], bool] = lambda: True  # sched-handler-sync: the first listing is in
    shutting_down: Callable[[], bool] = lambda: False
    registry: CollectorRegistry | None = None  # None: the process-wide one (``metrics.expose``)

    def checks(self, name: str) -> list[tuple[str, Callable[[], str | None]]]:
        """The named checks of ``/healthz``, ``/livez`` or ``/readyz``: the reference's, then ours."""
        leader = [("leaderElection", self.leader_election)] if self.leader_election is not None else []
        ours = self.health.named_checks()
        if name == "readyz":
            unsynced = "handlers are not fully synchronized"
            return [
                *leader,
                ("shutdown", lambda: "process is shutting down" if self.shutting_down() else None),
                ("sched-handler-sync", lambda: None if self.synced() else unsynced),
            ]
        if name == "healthz":
            return [*(leader or [("ping", lambda: None)]), *ours]
        return [("ping", lambda: None), *ours]


def _run_check(check: Callable[[], str | None]) -> str | None:
    try:
        return check()
    except Exception as exc:  # a check must not crash the probe
        return f"check raised {exc!r}"


def health_response(
    name: str, checks: Sequence[tuple[str, Callable[[], str | None]]], query: Mapping[str, list[str]]
) -> tuple[int, bytes]:
    """``healthz.handleRootHealth``: ``ok``, or each check's line with ``?verbose``; a failed check's
    reason is withheld from the body (logged)."""
    excluded = set(query.get("exclude", []))
    unknown = set(excluded)
    lines: list[str] = []
    failed: list[str] = []
    for check_name, check in checks:
        if check_name in excluded:
            unknown.discard(check_name)
            lines.append(f"[+]{check_name} excluded: ok\n")
            continue
        problem = _run_check(check)
        if problem:
            lines.append(f"[-]{check_name} failed: reason withheld\n")
            failed.append(f"{check_name}: {problem}")
        else:
            lines.append(f"[+]{check_name} ok\n")
    if unknown:
        quoted = ",".join(json.dumps(n) for n in sorted(unknown))
        lines.append(f"warn: some health checks cannot be excluded: no matches for {quoted}\n")
    if failed:
        log.info("%s check failed: %s", name, "; ".join(failed))
        return 500, f"{''.join(lines)}{name} check failed\n".encode()
    if "verbose" not in query:
        return 200, b"ok"
    return 200, f"{''.join(lines)}{name} check passed\n".encode()


def _status(code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return _go_json(body) + b"\n"


def _sanitize(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _go_quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _handler(
    endpoints: Endpoints, authn: Authenticator, authz: Authorizer, idle_timeout: float
) -> type[BaseHTTPRequestHandler]:
    """The handler class, built when the server starts: what it imports is not on the way to the
    first bind (``httpd.py``)."""
    import email.utils
    from http.server import BaseHTTPRequestHandler

    from prometheus_client import generate_latest

    from kopf_scheduler.cluster.metrics import expose

    registry = endpoints.registry if endpoints.registry is not None else expose()

    class Handler(BaseHTTPRequestHandler):
        timeout = idle_timeout

        def _dispatch(self) -> None:
            try:
                self._serve()
            except Exception:  # WithPanicRecovery
                log.exception("secure serving: %s %s failed", self.command, self.path)
                with contextlib.suppress(Exception):
                    self._reply(500, b"Internal Server Error\n", "text/plain; charset=utf-8", nosniff=True)

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _dispatch

        def _serve(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            path = url.path
            query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
            peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
            try:
                user = authn.authenticate(self.headers.get("Authorization"), peer)
            except Unauthenticated:
                self._reply(401, _status(401, "Unauthorized", "Unauthorized"), "application/json")
                return
            except Busy:
                self._busy()
                return
            attrs = Attributes(user, self.command.lower(), path)
            try:
                decision, reason, error = authz.authorize(attrs)
            except Busy:
                self._busy()
                return
            if decision != ALLOW:
                if error:
                    text = _sanitize(f"Internal Server Error: {_go_quote(self.path)}: {error}\n")
                    self._reply(500, text.encode(), "text/plain; charset=utf-8", nosniff=True)
                    return
                message = _sanitize(f"User {_go_quote(user.name)} cannot {attrs.verb} path {_go_quote(path)}")
                if reason:
                    message = f"{message}: {reason}"
                body = _status(403, "Forbidden", f"forbidden: {message}", {})
                self._reply(403, body, "application/json", nosniff=True)
                return
            self._route(path, query)

        def _route(self, path: str, query: Mapping[str, list[str]]) -> None:
            root, _, check = path.removeprefix("/").partition("/")
            if path in ("/healthz", "/livez", "/readyz"):
                code, body = health_response(root, endpoints.checks(root), query)
                self._reply(code, body, "text/plain; charset=utf-8", nosniff=True)
                return
            if root in ("healthz", "livez", "readyz") and path.startswith("/"):
                for name, fn in endpoints.checks(root):
                    if name == check:
                        problem = _run_check(fn)
                        if problem:
                            text = f"internal server error: {problem}\n".encode()
                            self._reply(500, text, "text/plain; charset=utf-8", nosniff=True)
                        else:
                            self._reply(200, b"ok", "text/plain; charset=utf-8")
                        return
            elif path == "/metrics":
                if self.command == "DELETE":
                    text = b"kopf-scheduler does not reset its metrics\n"
                    self._reply(405, text, "text/plain; charset=utf-8", nosniff=True)
                    return
                # The text the reference's promhttp writes (our names need no escaping).
                self._reply(200, generate_latest(registry), resource_metrics.CONTENT_TYPE)
                return
            elif path == "/metrics/resources":
                if not endpoints.is_leader():
                    self._reply(200, b"", None)  # the reference's handler writes nothing
                    return
                body = resource_metrics.render(list(endpoints.pods()))
                self._reply(200, body, resource_metrics.CONTENT_TYPE)
                return
            elif path == "/configz":
                configs = {} if endpoints.configz is None else {"componentconfig": endpoints.configz}
                self._reply(200, _go_json(configs), "application/json", nosniff=True)
                return
            self._reply(404, b"404 page not found\n", "text/plain; charset=utf-8", nosniff=True)

        def _busy(self) -> None:
            message = "too many requests wait for a review by the apiserver; try again in a second"
            body = _status(429, "TooManyRequests", message, {"retryAfterSeconds": 1})
            self._reply(429, body, "application/json", nosniff=True, extra={"Retry-After": "1"})

        def _reply(
            self,
            code: int,
            body: bytes,
            ctype: str | None,
            *,
            nosniff: bool = False,
            extra: Mapping[str, str] | None = None,
        ) -> None:
            self.send_response_only(code)
            self.send_header("Cache-Control", "no-cache, private")
            if ctype:
                self.send_header("Content-Type", ctype)
            if nosniff:
                self.send_header("X-Content-Type-Options", "nosniff")
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.send_header("Date", email.utils.formatdate(usegmt=True))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # probes every few seconds would flood the log

    return Handler


# --- the server -----------------------------------------------------------------------------------


class TLSContexts:
    """The server's SSL context, rebuilt when the serving pair or the client CA changes."""

    def __init__(
        self, certificate: ServingCertificate, client_ca: ClientCA | None, min_version: str = ""
    ) -> None:
        self.certificate = certificate
        self.client_ca = client_ca
        self.min_version = TLS_VERSIONS.get(min_version, ssl.TLSVersion.TLSv1_2)
        self._built: tuple[tuple[int, int], ssl.SSLContext] | None = None
        self._lock = threading.Lock()

    def __call__(self) -> ssl.SSLContext:
        self.certificate.refresh()
        cert_pem, key_pem = self.certificate.material()
        ca = self.client_ca
        key = (self.certificate.version, ca.version if ca is not None else 0)
        with self._lock:
            if self._built is None or self._built[0] != key:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.minimum_version = self.min_version
                context.set_alpn_protocols(["http/1.1"])
                _load_chain(context, cert_pem, key_pem)
                if ca is not None and ca.pem:
                    context.load_verify_locations(cadata=ca.pem.decode())
                    context.verify_mode = ssl.CERT_OPTIONAL
                self._built = (key, context)
            return self._built[1]


@dataclass
class SecureServing:
    """Prepared by :func:`prepare` before the operator starts (the port bound, the certificate
    loaded or being generated, the review clients), started with the running scheduler's
    :class:`Endpoints`."""

    sock: socket.socket
    tls: TLSContexts
    authenticator: Authenticator
    authorizer: Authorizer
    client_ca: ClientCA | None = None
    workers: int = WORKERS
    idle_timeout: float = IDLE_TIMEOUT
    server: SecureServer | None = None

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def start(self, endpoints: Endpoints) -> SecureServer:
        from kopf_scheduler.cluster.httpd import SecureServer

        handler = _handler(endpoints, self.authenticator, self.authorizer, self.idle_timeout)
        host, port = self.sock.getsockname()[:2]
        server = SecureServer(
            (host, port),
            handler,
            tls=self.tls,
            workers=self.workers,
            idle_timeout=self.idle_timeout,
            sock=self.sock,
        )
        self.server = server
        self.tls.certificate.begin()
        threading.Thread(target=server.serve_forever, name="kopf-scheduler-https", daemon=True).start()
        if self.client_ca is not None:
            name = "kopf-scheduler-client-ca"
            threading.Thread(target=self._client_ca_first, name=name, daemon=True).start()
        log.info("Serving securely on %s", _join(host, port))
        return server

    def _client_ca_first(self) -> None:
        assert self.client_ca is not None
        self.client_ca.refresh()
        self.client_ca.run()

    def stop(self) -> None:
        if self.client_ca is not None:
            self.client_ca.stop.set()
        if self.server is not None:
            with contextlib.suppress(Exception):
                self.server.shutdown()
                self.server.server_close()
            self.server = None
        else:
            with contextlib.suppress(OSError):
                self.sock.close()


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listen(bind_address: str, port: int) -> socket.socket:
    """``CreateListener``: an unspecified address listens on every family (dual stack where there
    is IPv6), as Go's net.Listen does."""
    address = bind_address or "0.0.0.0"
    ip = ipaddress.ip_address(address)
    try:
        if ip.is_unspecified and socket.has_dualstack_ipv6():
            sock = socket.create_server(
                ("::", port), family=socket.AF_INET6, backlog=512, dualstack_ipv6=True
            )
        else:
            family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            sock = socket.create_server((address, port), family=family, backlog=512)
    except OSError as exc:
        where = _join(address, port)
        raise ServingError(
            f"failed to create listener: failed to listen on {where}: listen tcp {where}: "
            f"bind: {(os.strerror(exc.errno) if exc.errno else str(exc)).lower()}"
        ) from None
    return sock


def prepare(
    serving: ServingOptions, auth: AuthOptions, *, workers: int = WORKERS, idle_timeout: float = IDLE_TIMEOUT
) -> SecureServing | None:
    """What ``run`` does before the operator starts; None with ``--secure-port=0``. Raises
    :class:`ServingError` (the reference's message) when it cannot serve as asked."""
    if not 0 <= serving.port <= 65535:
        raise ServingError(
            f"--secure-port {serving.port} must be between 0 and 65535, inclusive. "
            "0 for turning off secure port"
        )
    if serving.min_tls_version and serving.min_tls_version not in TLS_VERSIONS:
        raise ServingError(f"unknown tls version constant: {serving.min_tls_version}")
    try:
        ipaddress.ip_address(serving.bind_address or "0.0.0.0")
    except ValueError:
        raise ServingError(f'invalid argument "{serving.bind_address}" for "--bind-address" flag') from None
    if serving.port == 0:
        return None
    path_rules(auth.always_allow_paths)  # a bad pattern fails here
    certificate = serving_certificate(serving)
    budget = ReviewBudget(workers - 1)
    authn_creds = _credentials(auth.authentication_kubeconfig, "authentication")
    authz_creds = _credentials(auth.authorization_kubeconfig, "authorization")
    authn_reviews = None
    if authn_creds is not None:
        authn_reviews = ReviewClient(authn_creds, timeout=auth.request_timeout, budget=budget)
    authz_reviews = None
    if authz_creds is not None:
        authz_reviews = ReviewClient(authz_creds, timeout=auth.request_timeout, budget=budget)
    client_ca: ClientCA | None = None
    if auth.client_ca_file:
        client_ca = ClientCA(file=auth.client_ca_file)
        client_ca.refresh()
        if client_ca.pem is None:
            raise ServingError(f"unable to load client CA provider: {auth.client_ca_file}")
    elif not auth.skip_lookup:
        if authn_reviews is None:
            log.warning(
                "No authentication-kubeconfig provided in order to lookup client-ca-file in "
                "configmap/extension-apiserver-authentication in kube-system, so client certificate "
                "authentication won't work."
            )
        else:
            client_ca = ClientCA(reader=authn_reviews)
    if authz_reviews is None:
        log.warning(
            "No authorization-kubeconfig provided, so SubjectAccessReview of authorization tokens won't work."
        )
    sock = listen(serving.bind_address, serving.port)
    return SecureServing(
        sock=sock,
        tls=TLSContexts(certificate, client_ca, serving.min_tls_version),
        authenticator=Authenticator(
            authn_reviews, client_certificates=client_ca is not None, ttl=auth.token_cache_ttl
        ),
        authorizer=Authorizer(
            authz_reviews,
            always_allow_paths=auth.always_allow_paths,
            always_allow_groups=auth.always_allow_groups,
            allow_ttl=auth.allow_cache_ttl,
            deny_ttl=auth.deny_cache_ttl,
        ),
        client_ca=client_ca,
        workers=workers,
        idle_timeout=idle_timeout,
    )
