"""Credentials through the kubernetes library's loaders: exec plugins, files, in-cluster, 401 refresh."""

from __future__ import annotations

import ast
import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from kopf_scheduler.cluster import connection
from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.connection import (
    ConnectionInfo,
    Credentials,
    LoginError,
    from_kubeconfig,
    in_cluster,
    load_credentials,
)
from kopf_scheduler_workbench.testing.exec_credential import ExecPlugin


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _kubeconfig(path: Path, user: dict[str, object], cluster: dict[str, object] | None = None) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443", **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [
            {"name": "main", "context": {"cluster": "c", "user": "u", "namespace": "team"}},
            {"name": "other", "context": {"cluster": "c", "user": "u"}},
        ],
        "current-context": "main",
    }
    path.write_text(json.dumps(config))
    return path


def _exec_credentials(plugin: ExecPlugin, path: Path, clock: Clock) -> Credentials:
    source = connection._kubeconfig_source(str(plugin.kubeconfig(path, "https://10.0.0.1:6443")), None)
    return Credentials(source(), source, clock=clock)


async def test_exec_plugin_token_is_cached_until_it_expires(tmp_path: Path) -> None:
    plugin = ExecPlugin(tmp_path / "plugin", "first", ttl=600)
    clock = Clock(time.time())
    creds = _exec_credentials(plugin, tmp_path / "kubeconfig", clock)
    assert await creds.headers() == {"Authorization": "Bearer first"}
    assert plugin.calls == 1
    info = creds.info
    assert info.server == "https://10.0.0.1:6443" and info.token == "first"
    expires = creds.expires_at()
    assert expires is not None and 590 < expires - clock.now <= 601  # Kopf re-logs in at this time
    exec_info = json.loads((plugin.state / "calls").read_text().splitlines()[0])
    assert exec_info["kind"] == "ExecCredential"

    plugin.set("second")
    clock.now += 300  # still valid: no second run, the cached token goes out
    for _ in range(3):
        assert await creds.headers() == {"Authorization": "Bearer first"}
    assert plugin.calls == 1

    clock.now = expires - connection.EXPIRY_MARGIN_SECONDS  # expired (with the margin): run again
    assert (
        await asyncio.gather(*(creds.headers() for _ in range(5))) == [{"Authorization": "Bearer second"}] * 5
    )
    assert plugin.calls == 2  # a burst of requests that found it expired ran the plugin once


def test_kopf_logins_after_the_first_load_anew(tmp_path: Path) -> None:
    plugin = ExecPlugin(tmp_path / "plugin", "first")
    clock = Clock(1000.0)
    creds = _exec_credentials(plugin, tmp_path / "kubeconfig", clock)
    assert creds.connection_info().token == "first" and plugin.calls == 1  # start-up: the loaded one
    plugin.set("second")
    info = creds.connection_info()  # Kopf logs in again only after a 401 or past the expiration
    assert info.token == "second" and plugin.calls == 2
    assert info.expiration is not None


def test_exec_plugin_failure_is_a_login_error_with_its_stderr(tmp_path: Path) -> None:
    plugin = ExecPlugin(tmp_path / "plugin", "t")
    plugin.fail("error: the SSO session has expired; run aws sso login")
    with pytest.raises(LoginError, match=r"exec plugin gave no credential.*SSO session has expired"):
        from_kubeconfig(plugin.kubeconfig(tmp_path / "kubeconfig", "https://10.0.0.1:6443"))


async def test_a_failing_refresh_keeps_the_old_credential(tmp_path: Path) -> None:
    plugin = ExecPlugin(tmp_path / "plugin", "first", ttl=10)
    clock = Clock(0.0)
    creds = _exec_credentials(plugin, tmp_path / "kubeconfig", clock)
    clock.now = 1e10  # long expired
    plugin.fail("boom")
    assert await creds.headers() == {"Authorization": "Bearer first"}
    assert plugin.calls == 2
    plugin.fail(None)
    plugin.set("second")
    for _ in range(3):  # not run again by every request
        assert await creds.headers() == {"Authorization": "Bearer first"}
    assert plugin.calls == 2
    clock.now += connection.RETRY_SECONDS
    assert await creds.headers() == {"Authorization": "Bearer second"}
    assert plugin.calls == 3


@pytest.mark.parametrize(
    ("content", "context", "match"),
    [
        (None, None, "no such file"),
        ("", None, "Invalid kube-config"),
        ("users: [", None, "kubeconfig"),
        ("ok", "missing", "missing"),
    ],
)
def test_kubeconfigs_that_cannot_work_raise_login_error(
    tmp_path: Path, content: str | None, context: str | None, match: str
) -> None:
    path = tmp_path / "kubeconfig"
    if content == "ok":
        _kubeconfig(path, {"token": "t"})
    elif content is not None:
        path.write_text(content)
    with pytest.raises(LoginError, match=match):
        from_kubeconfig(path, context)


def test_token_file_is_reread_every_minute(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    path = _kubeconfig(tmp_path / "kubeconfig", {"tokenFile": "token"})  # relative to the kubeconfig
    source = connection._kubeconfig_source(str(path), None)
    clock = Clock(0.0)
    creds = Credentials(source(), source, clock=clock)
    assert creds.info.token == "one" and creds.info.default_namespace == "team"
    token.write_text("two\n")
    clock.now = connection.FILE_REFRESH_SECONDS - 1
    assert not creds.stale()
    clock.now = connection.FILE_REFRESH_SECONDS
    assert creds.stale()
    assert asyncio.run(creds.headers()) == {"Authorization": "Bearer two"}


def test_client_certificates_context_proxy_and_tls_settings(tmp_path: Path) -> None:
    cert, key, ca = b"CERT PEM\n", b"KEY PEM\n", b"CA PEM\n"
    user = {
        "client-certificate-data": base64.b64encode(cert).decode(),
        "client-key-data": base64.b64encode(key).decode(),
    }
    cluster = {
        "certificate-authority-data": base64.b64encode(ca).decode(),
        "proxy-url": "http://proxy.example:3128",
        "tls-server-name": "kubernetes.default",
    }
    creds = from_kubeconfig(_kubeconfig(tmp_path / "kubeconfig", user, cluster), context="other")
    info = creds.info
    assert Path(str(info.certificate_path)).read_bytes() == cert
    assert Path(str(info.private_key_path)).read_bytes() == key
    assert Path(str(info.ca_path)).read_bytes() == ca
    assert info.proxy_url == "http://proxy.example:3128" and not info.insecure
    assert creds.tls_server_name == "kubernetes.default"
    assert info.default_namespace is None  # context "other" names none
    assert creds.info.as_http_headers() == {}


def test_insecure_and_basic_auth(tmp_path: Path) -> None:
    path = _kubeconfig(
        tmp_path / "kubeconfig", {"username": "u", "password": "p"}, {"insecure-skip-tls-verify": True}
    )
    info = from_kubeconfig(path).info
    assert info.insecure is True
    assert info.as_http_headers() == {"Authorization": "Basic " + base64.b64encode(b"u:p").decode()}


def test_oidc_auth_provider_id_token(tmp_path: Path) -> None:
    """An unexpired OIDC id-token is used as it is (refreshing one needs the identity provider)."""

    def b64(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    jwt = f"{b64({'alg': 'RS256'})}.{b64({'exp': int(time.time()) + 3600, 'sub': 'me'})}.c2ln"
    provider = {"name": "oidc", "config": {"id-token": jwt, "client-id": "kubernetes"}}
    creds = from_kubeconfig(_kubeconfig(tmp_path / "kubeconfig", {"auth-provider": provider}))
    assert creds.info.as_http_headers() == {"Authorization": f"Bearer {jwt}"}


def test_kubeconfig_env_lists_are_merged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _kubeconfig(tmp_path / "a", {"token": "from-a"})
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{first}")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert load_credentials().info.token == "from-a"


def test_in_cluster_service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("CA")
    (tmp_path / "namespace").write_text("kopf-scheduler")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    creds = in_cluster(tmp_path)
    assert creds.server == "https://[fd00::1]:443"
    assert creds.info.as_http_headers() == {"Authorization": "Bearer sa-token"}
    assert creds.info.ca_path == str(tmp_path / "ca.crt")
    assert creds.info.default_namespace == "kopf-scheduler"
    assert creds.loaded.reload_every == connection.FILE_REFRESH_SECONDS
    (tmp_path / "token").unlink()
    with pytest.raises(LoginError, match=r"in-cluster.*token file"):
        in_cluster(tmp_path)


@pytest.fixture
async def token_checking_server() -> AsyncIterator[tuple[str, dict[str, object]]]:
    """A fake apiserver accepting only ``state["valid"]`` as the bearer token; counts 401s."""
    state: dict[str, object] = {"valid": "second", "rejected": 0, "seen": []}

    async def handle(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        state["seen"].append(auth)  # type: ignore[attr-defined]
        if auth != f"Bearer {state['valid']}":
            state["rejected"] = int(state["rejected"]) + 1  # type: ignore[call-overload]
            return web.json_response({"message": "Unauthorized"}, status=401)
        return web.json_response({"kind": "PodList", "items": []})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", state
    await runner.cleanup()


async def test_401_runs_the_plugin_again_once_and_retries(
    tmp_path: Path, token_checking_server: tuple[str, dict[str, object]]
) -> None:
    server, state = token_checking_server
    plugin = ExecPlugin(tmp_path / "plugin", "first", ttl=3600)  # revoked before it expires
    creds = from_kubeconfig(plugin.kubeconfig(tmp_path / "kubeconfig", server))
    plugin.set("second")
    async with ApiClient(creds) as api:
        results = await asyncio.gather(*(api.request("GET", "/api/v1/pods") for _ in range(4)))
    assert all(r["kind"] == "PodList" for r in results)
    assert plugin.calls == 2  # four 401s, one reload
    assert state["rejected"] == 4 and state["seen"][-1] == "Bearer second"  # type: ignore[index]


def test_run_with_a_broken_kubeconfig_is_a_clean_error(tmp_path: Path) -> None:
    plugin = ExecPlugin(tmp_path / "plugin", "t")
    plugin.fail("error: credentials expired")
    path = plugin.kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:9")
    result = subprocess.run(
        [sys.executable, "-m", "kopf_scheduler", "run", "--kubeconfig", str(path), "--metrics-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("kopf-scheduler: cannot log in to the cluster: ")
    assert "credentials expired" in result.stderr


def _self_signed_pem(tmp_path: Path, name: str) -> bytes:
    key, cert = tmp_path / f"{name}.key", tmp_path / f"{name}.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "1", "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert.read_bytes()


async def test_new_tls_material_gets_a_new_session_and_the_old_one_is_closed(tmp_path: Path) -> None:
    """An exec plugin may issue certificates: connections after a reload must use the new material."""
    cas = iter([_self_signed_pem(tmp_path, "ca1"), _self_signed_pem(tmp_path, "ca2")])

    def source() -> connection.Loaded:
        return connection.Loaded(ConnectionInfo(server="https://127.0.0.1:9", ca_data=next(cas)))

    creds = Credentials(source(), source)
    api = ApiClient(creds)
    first = api.session
    assert api.session is first  # same material: same session
    creds.reload()
    second = api.session
    assert second is not first and not first.closed  # requests in flight on the old one may finish
    await api.close()
    assert first.closed and second.closed


def _loaded_by_reading(path: Path, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh process has imported once it read the (token ``t0k``) kubeconfig."""
    code = (
        "import sys\n"
        "from kopf_scheduler.cluster.connection import load_credentials\n"
        f"assert load_credentials({str(path)!r}).info.token == 't0k'\n"
        f"print(sorted(m for m in {modules!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return list(ast.literal_eval(out.stdout.strip()))


def test_a_token_kubeconfig_is_read_as_the_library_reads_it_without_importing_it(tmp_path: Path) -> None:
    """The quick reading (a plain token user) gives what the library's loader gives, and a process
    that loads such credentials never imports ``kubernetes`` (~0.1 s of the start-up)."""
    ca = b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
    cluster = {"certificate-authority-data": base64.b64encode(ca).decode(), "tls-server-name": "kube"}
    path = _kubeconfig(tmp_path / "kubeconfig", {"token": "t0k\n"}, cluster)
    quick = connection._static_kubeconfig(str(path), None)
    assert quick is not None
    full = connection._kubeconfig_source(str(path) + os.pathsep, None)()  # a list: the library's way
    assert (
        (quick.info.server, quick.info.token, quick.info.default_namespace)
        == (
            full.info.server,
            full.info.token,
            full.info.default_namespace,
        )
        == ("https://10.0.0.1:6443", "t0k", "team")
    )
    assert quick.info.as_http_headers() == full.info.as_http_headers() == {"Authorization": "Bearer t0k"}
    assert quick.tls_server_name == full.tls_server_name == "kube"
    assert connection._pem(str(quick.info.ca_data)).encode() == Path(str(full.info.ca_path)).read_bytes()
    # Anything else is the library's: a client certificate, an exec plugin, a token file.
    for user in ({"token": "t", "client-certificate": "c"}, {"tokenFile": "f"}, {"exec": {}}):
        assert connection._static_kubeconfig(str(_kubeconfig(tmp_path / "other", user)), None) is None
    assert _loaded_by_reading(path, ("kubernetes", "kopf")) == []


def test_kopfs_login_gets_kopfs_connection_info_with_the_expiry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kopf's login handler hands Kopf its own ConnectionInfo, field for field, the exec plugin's
    expiry included (its tzinfo, the library's, is not deep-copyable: a deep copy failed here)."""
    import kopf

    from kopf_scheduler.cluster import operator

    plugin = ExecPlugin(tmp_path / "plugin", "first")
    creds = _exec_credentials(plugin, tmp_path / "kubeconfig", Clock(1000.0))
    monkeypatch.setattr(operator, "_RUNTIME", None)
    monkeypatch.setattr(operator, "_CREDENTIALS", creds)
    info = operator.login()
    assert isinstance(info, kopf.ConnectionInfo)
    assert info.token == "first" and info.server == creds.info.server
    assert info.expiration is not None and info.expiration == creds.info.expiration


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"HTTPS_PROXY": "http://p:1"},
        {"https_proxy": "http://p:1", "HTTPS_PROXY": "http://q:2"},
        {"https_proxy": "", "HTTPS_PROXY": "http://q:2"},
        {"Http_Proxy": "http://p:1"},
        {"HTTP_PROXY": "http://p:1", "REQUEST_METHOD": "GET"},
        {"http_proxy": "http://p:1", "REQUEST_METHOD": "GET"},
        {"ALL_PROXY": "socks5://p:1", "no_proxy": "example.com", "NOT_A_PROXY": "x"},
    ],
)
def test_environment_proxies_are_read_as_urllib_reads_them(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str]
) -> None:
    """Spelled by hand to keep urllib.request off the way to the first bind; the same answer."""
    import urllib.request

    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name == "REQUEST_METHOD":
            monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert connection.environment_proxies() == urllib.request.getproxies_environment()


def test_a_json_kubeconfig_is_read_without_yaml_and_a_yaml_one_alike(tmp_path: Path) -> None:
    """JSON is YAML: a kubeconfig written as JSON gives what the same written as YAML gives, and
    reading it does not import PyYAML (~10 ms of the start); YAML and not-quite-JSON still read."""
    import yaml

    path = _kubeconfig(tmp_path / "kubeconfig.json", {"token": "t0k"})
    config = json.loads(path.read_text())
    as_yaml = tmp_path / "kubeconfig.yaml"
    as_yaml.write_text(yaml.safe_dump(config))
    flow = tmp_path / "kubeconfig.flow"  # a YAML flow mapping: starts like JSON, is not JSON
    flow.write_text(path.read_text().replace('"current-context": "main"', "current-context: main"))
    read = [connection._static_kubeconfig(str(p), None) for p in (path, as_yaml, flow)]
    assert [(r.info.server, r.info.token, r.info.default_namespace) for r in read if r is not None] == [
        ("https://10.0.0.1:6443", "t0k", "team")
    ] * 3
    assert _loaded_by_reading(path, ("yaml",)) == []
