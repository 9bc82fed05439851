"""The secure port against kube-scheduler v1.37.2's, side by side on one control plane (issue 27).

Both are started with the same KubeSchedulerConfiguration and the same delegation identity: the
manifests' ServiceAccount (``--authentication-kubeconfig``/``--authorization-kubeconfig``; its
``system:auth-delegator`` and ``extension-apiserver-authentication-reader`` bindings come from
manifests/). The apiserver has a client CA of the test's own, so client certificates are verified
through the cluster's ConfigMap as in a real cluster. Each request below goes to both, and the
status and body must be the same: a token that does not pass is 401, no token is
``system:anonymous`` (403 on /metrics; kube-scheduler answers 403 there, not 401), a token without
the RBAC is 403 with the reference's Status, a token or certificate with it is 200, the health
paths are open. Then /configz, /metrics/resources against the reference's for the same pods, the
standby's empty /metrics/resources, the self-signed certificate, the review caches' TTLs, and a
port in use at start-up.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_operator_helpers import ROOT, deploy, free_port, wait_for

pytestmark = pytest.mark.integration

NS = "serving-test"
PEERING = "serving-test"
READER_PATHS = ["/metrics", "/metrics/resources", "/configz"]


# --- certificates and requests -------------------------------------------------------------------


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass
class ClientCA:
    key: rsa.RSAPrivateKey
    cert: x509.Certificate
    path: Path

    @classmethod
    def make(cls, directory: Path) -> ClientCA:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name("serving-test-client-ca"))
            .issuer_name(_name("serving-test-client-ca"))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        path = directory / "client-ca.crt"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls(key, cert, path)

    def issue(self, directory: Path, cn: str, org: str) -> tuple[Path, Path]:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, org))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        crt, pem = directory / f"{cn}.crt", directory / f"{cn}.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pem.write_bytes(_pem_key(key))
        return crt, pem


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str


def request(port: int, path: str, token: str | None = None, cert: tuple[Path, Path] | None = None) -> Answer:
    """One HTTPS request as a scraper makes it: the self-signed certificate is not verified."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, context=context, timeout=15) as resp:
            return Answer(resp.status, resp.read(), resp.headers.get("Content-Type") or "")
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read(), exc.headers.get("Content-Type") or "")


def served_chain(port: int) -> list[x509.Certificate]:
    """The certificates the server sends (leaf first), as ``openssl s_client -showcerts`` shows them."""
    out = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-showcerts"],
        input="",
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    pems = re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", out, re.S)
    return [x509.load_pem_x509_certificate(p.encode()) for p in pems]


# --- the cluster, the two schedulers ---------------------------------------------------------------


class Process:
    def __init__(self, name: str, cmd: list[str], log_dir: Path, port: int, env: dict[str, str]) -> None:
        self.name = name
        self.port = port
        self.log_path = log_dir / f"{name}.log"
        self.log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    def logs(self, tail: int = 5000) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-tail:]

    def said(self, words: str) -> bool:
        return words in self.logs(tail=10**9)

    def get(self, path: str, token: str | None = None, cert: tuple[Path, Path] | None = None) -> Answer:
        return request(self.port, path, token, cert)

    def ready(self) -> bool:
        assert self.proc.poll() is None, self.logs()
        try:
            return self.get("/readyz").status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


@dataclass
class Cluster:
    plane: ControlPlane
    ours: Process  # leads
    standby: Process  # ours too, short review caches (2 s)
    reference: Process  # leads its Lease
    reference_standby: Process
    tokens: dict[str, str]
    certs: dict[str, tuple[Path, Path]]
    tmp: Path


def _config(path: Path, kubeconfig: Path) -> Path:
    """One configuration for both (but the kubeconfig): two profiles, a non-default one among them."""
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": True, "resourceName": PEERING},
        "percentageOfNodesToScore": 70,
        "profiles": [
            {"schedulerName": "serving-a"},
            {
                "schedulerName": "serving-b",
                "plugins": {"score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]}},
                "pluginConfig": [
                    {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
                ],
            },
        ],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _token(plane: ControlPlane, name: str) -> str:
    plane.kubectl("create", "serviceaccount", name, "-n", NS)
    return plane.kubectl("create", "token", name, "-n", NS, "--duration=1h").strip()


def _bind_reader(plane: ControlPlane, binding: str, subject: dict[str, str]) -> None:
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": binding},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "serving-reader",
                },
                "subjects": [subject],
            }
        ),
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("serving")
    ca = ClientCA.make(tmp)
    plane = ControlPlane(apiserver_args=[f"--client-ca-file={ca.path}"])
    processes: list[Process] = []
    try:
        plane.start()
        sa = deploy(plane)  # the manifests' ServiceAccount, RBAC and bindings
        plane.kubectl("create", "namespace", NS)
        plane.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": "serving-reader"},
                    "rules": [{"nonResourceURLs": READER_PATHS, "verbs": ["get"]}],
                }
            ),
        )
        tokens = {name: _token(plane, name) for name in ("prometheus", "nobody", "temp", "late")}
        for name in ("prometheus", "temp"):
            _bind_reader(plane, f"serving-{name}", {"kind": "ServiceAccount", "name": name, "namespace": NS})
        _bind_reader(
            plane,
            "serving-readers",
            {"kind": "Group", "name": "readers", "apiGroup": "rbac.authorization.k8s.io"},
        )
        certs = {
            "cert-reader": ca.issue(tmp, "cert-reader", "readers"),
            "cert-admin": ca.issue(tmp, "cert-admin", "system:masters"),
            "cert-nobody": ca.issue(tmp, "cert-nobody", "nobodies"),
        }
        ours_config = _config(tmp / "ours.yaml", sa)
        reference_config = _config(tmp / "reference.yaml", plane.kubeconfig)
        delegation = [f"--authentication-kubeconfig={sa}", f"--authorization-kubeconfig={sa}"]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp)}
        py_env = {
            k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KOPF_SCHEDULER_SECURE_PORT")
        }

        def ours(name: str, *extra: str) -> Process:
            port = free_port()
            cmd = [sys.executable, "-m", "kopf_scheduler", "run", f"--config={ours_config}"]
            cmd += [f"--secure-port={port}", "--bind-address=127.0.0.1", *delegation, *extra]
            cmd += ["--metrics-host=127.0.0.1", f"--metrics-port={free_port()}"]
            p = Process(name, cmd, tmp, port, {**py_env, "POD_ID": name})
            processes.append(p)
            return p

        def reference(name: str) -> Process:
            port = free_port()
            cmd = [str(plane.bin_path), "kube-scheduler", f"--config={reference_config}"]
            cmd += [f"--secure-port={port}", "--bind-address=127.0.0.1", *delegation]
            p = Process(name, cmd, tmp, port, env)
            processes.append(p)
            return p

        first = ours("ours")
        ref = reference("reference")
        wait_for(first.ready, 60, what=f"ours ready:\n{first.logs()}")
        wait_for(ref.ready, 60, what=f"the reference ready:\n{ref.logs()}")
        wait_for(lambda: first.said("Leading"), 30, what=f"ours leads:\n{first.logs()}")
        wait_for(lambda: ref.said("Successfully acquired lease"), 30, what=f"ref leads:\n{ref.logs()}")
        short = [
            "--authentication-token-webhook-cache-ttl=2s",
            "--authorization-webhook-cache-authorized-ttl=2s",
            "--authorization-webhook-cache-unauthorized-ttl=2s",
        ]
        standby = ours("ours-standby", *short)
        ref_standby = reference("reference-standby")
        wait_for(standby.ready, 60, what=f"our standby ready:\n{standby.logs()}")
        wait_for(ref_standby.ready, 60, what=f"the reference's standby ready:\n{ref_standby.logs()}")
        yield Cluster(plane, first, standby, ref, ref_standby, tokens, certs, tmp)
    finally:
        for p in processes:
            p.stop()
        plane.stop()


# --- the tests -----------------------------------------------------------------------------------


def test_authentication_and_authorization_answer_as_the_reference(cluster: Cluster) -> None:
    c = cluster
    t, certs = c.tokens, c.certs
    cases: list[tuple[str, str | None, tuple[Path, Path] | None, int]] = [
        # path, token, client certificate, the status both must answer
        ("/metrics", None, None, 403),  # anonymous: the reference's 403, not 401
        ("/metrics", "not-a-token", None, 401),
        ("/metrics", t["nobody"], None, 403),  # authenticated, no RBAC
        ("/metrics", t["prometheus"], None, 200),
        ("/metrics", None, certs["cert-reader"], 200),  # CN cert-reader in group readers
        ("/metrics", None, certs["cert-nobody"], 403),
        ("/metrics", None, certs["cert-admin"], 200),  # system:masters, never reviewed
        ("/configz", None, None, 403),
        ("/configz", t["nobody"], None, 403),
        ("/configz", t["prometheus"], None, 200),
        ("/metrics/resources", t["prometheus"], None, 200),
        ("/healthz", None, None, 200),  # always allowed
        ("/healthz", t["nobody"], None, 200),
        ("/healthz", "not-a-token", None, 401),  # authentication comes first, even there
        ("/livez", None, None, 200),
        ("/readyz", None, None, 200),
        ("/healthz/ping", None, None, 403),  # exact paths only
        ("/nope", None, certs["cert-admin"], 404),
        ("/nope", t["prometheus"], None, 403),
    ]
    for path, token, cert, status in cases:
        ours = c.ours.get(path, token, cert)
        ref = c.reference.get(path, token, cert)
        who = f"{path} token={token and token[:8]} cert={cert and cert[0].name}"
        assert (ours.status, ref.status) == (status, status), (who, ours, ref)
        assert ours.content_type == ref.content_type, (who, ours, ref)
        if status != 200 or path in ("/healthz", "/livez"):
            assert ours.body == ref.body, (who, ours.body, ref.body)
    # The reference's words, for the record.
    denied = json.loads(c.ours.get("/metrics", t["nobody"]).body)
    assert (
        denied["message"] == f'forbidden: User "system:serviceaccount:{NS}:nobody" cannot get path "/metrics"'
    )
    assert json.loads(c.ours.get("/metrics").body)["message"] == (
        'forbidden: User "system:anonymous" cannot get path "/metrics"'
    )
    # What is served: our metrics, the readiness in the reference's format with our checks.
    assert b"scheduler_pending_pods" in c.ours.get("/metrics", t["prometheus"]).body
    verbose = c.ours.get("/healthz?verbose").body.decode()
    assert verbose.splitlines() == [
        "[+]leaderElection ok",
        "[+]event-loop ok",
        "[+]tasks ok",
        "[+]supervised ok",
        "healthz check passed",
    ]
    assert c.reference.get("/healthz?verbose").body.decode().splitlines() == [
        "[+]leaderElection ok",
        "healthz check passed",
    ]
    assert c.ours.get("/readyz?verbose").body == c.reference.get("/readyz?verbose").body


def test_configz_is_the_references(cluster: Cluster) -> None:
    token = cluster.tokens["prometheus"]
    ours = json.loads(cluster.ours.get("/configz", token).body)
    ref = json.loads(cluster.reference.get("/configz", token).body)
    assert list(ours) == list(ref) == ["componentconfig"]
    # The only difference: each names its own kubeconfig in the file.
    ours["componentconfig"]["clientConnection"]["kubeconfig"] = "K"
    ref["componentconfig"]["clientConnection"]["kubeconfig"] = "K"
    for key in {*ours["componentconfig"], *ref["componentconfig"]}:  # field by field, for the message
        assert ours["componentconfig"].get(key) == ref["componentconfig"].get(key), key
    assert ours == ref
    assert [p["schedulerName"] for p in ours["componentconfig"]["profiles"]] == ["serving-a", "serving-b"]


def _pods() -> list[dict[str, Any]]:
    ns, node = f"{NS}-res", f"{NS}-n1"

    def pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}

    def c(
        name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None
    ) -> dict[str, Any]:
        resources: dict[str, Any] = {}
        if requests:
            resources["requests"] = requests
        if limits:
            resources["limits"] = limits
        return {"name": name, "image": "registry.k8s.io/pause:3.10", "resources": resources}

    return [
        pod(
            "plain",
            {
                "nodeName": node,
                "containers": [c("a", {"cpu": "100m", "memory": "128Mi"}, {"memory": "256Mi"})],
            },
        ),
        pod(
            "two",  # 0.3 is stored as 300m: 300m + 1 = 1300m, 1.3
            {
                "nodeName": node,
                "containers": [c("a", {"cpu": "0.3", "memory": "1Gi"}, {"cpu": "2"}), c("b", {"cpu": "1"})],
            },
        ),
        pod(
            "init-and-sidecar",
            {
                "nodeName": node,
                "initContainers": [
                    c("init", {"cpu": "1", "memory": "64Mi"}),
                    {**c("sidecar", {"cpu": "200m", "memory": "32Mi"}), "restartPolicy": "Always"},
                    c("late-init", {"cpu": "700m"}),
                ],
                "containers": [c("main", {"cpu": "500m", "memory": "100M"})],
            },
        ),
        pod(
            "pod-level",
            {
                "nodeName": node,
                "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
                "containers": [c("a", {"cpu": "100m"}), c("b")],
            },
        ),
        pod(
            "extended",
            {
                "nodeName": node,
                "priorityClassName": "serving-high",
                "containers": [
                    c(
                        "a",
                        {
                            "example.com/gpu": "2",
                            "hugepages-2Mi": "4Mi",
                            "memory": "64Mi",
                            "ephemeral-storage": "1G",
                        },
                        {"example.com/gpu": "2", "hugepages-2Mi": "4Mi"},
                    )
                ],
            },
        ),
        pod("pending", {"schedulerName": "nobody-schedules-this", "containers": [c("a", {"cpu": "10m"})]}),
        pod("finished", {"nodeName": node, "containers": [c("a", {"cpu": "3"})]}),
    ]


def _samples(text: bytes, ns: str) -> list[str]:
    return sorted(line for line in text.decode().splitlines() if f'namespace="{ns}"' in line)


def test_resource_metrics_are_the_references_and_only_the_leader_serves_them(cluster: Cluster) -> None:
    plane, token = cluster.plane, cluster.tokens["prometheus"]
    ns = f"{NS}-res"
    plane.kubectl("create", "namespace", ns)
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "serving-high"},
                "value": 1000,
            }
        ),
    )
    plane.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": _pods()})
    )
    plane.kubectl(
        "patch", "pod", "finished", "-n", ns, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"phase": "Succeeded"}}),
    )  # fmt: skip

    def both() -> tuple[list[str], list[str]] | None:
        ours = _samples(cluster.ours.get("/metrics/resources", token).body, ns)
        ref = _samples(cluster.reference.get("/metrics/resources", token).body, ns)
        # every pod but the finished one is there, in both
        complete = all(
            any(f'pod="{p}"' in line for line in lines)
            for lines in (ours, ref)
            for p in ("pending", "extended")
        )
        return (ours, ref) if complete and not any('pod="finished"' in line for line in ours + ref) else None

    ours, ref = wait_for(both, 60, what="both report the pods")
    assert ours == ref
    assert len(ours) >= 12
    text = cluster.ours.get("/metrics/resources", token)
    reference = cluster.reference.get("/metrics/resources", token)
    assert text.content_type == reference.content_type
    heads = [line for line in text.body.decode().splitlines() if line.startswith("#")]
    assert heads == [line for line in reference.body.decode().splitlines() if line.startswith("#")]
    by_pod = "\n".join(ours)
    assert 'pod="two",priority="0",resource="cpu",scheduler="default-scheduler",unit="cores"} 1.3' in by_pod
    assert 'node="",pod="pending"' in by_pod
    assert 'pod="extended",priority="1000",resource="example.com/gpu"' in by_pod
    # A replica that does not lead answers 200 and nothing, as the reference's standby.
    for standby in (cluster.standby, cluster.reference_standby):
        answer = standby.get("/metrics/resources", token)
        assert (answer.status, answer.body) == (200, b""), standby.name
    plane.kubectl("delete", "namespace", ns, "--wait=false")


def test_the_self_signed_certificate_is_the_references_kind(cluster: Cluster) -> None:
    chains = {p.name: served_chain(p.port) for p in (cluster.ours, cluster.reference)}
    for name, chain in chains.items():
        assert len(chain) == 2, name  # the serving certificate, then its CA
        leaf, ca = chain
        assert re.fullmatch(r"localhost@\d+", leaf.subject.rfc4514_string().removeprefix("CN=")), name
        assert re.fullmatch(r"localhost-ca@\d+", ca.subject.rfc4514_string().removeprefix("CN=")), name
        assert leaf.issuer == ca.subject
        assert leaf.public_key().key_size == ca.public_key().key_size == 2048  # type: ignore[union-attr]
        lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
        assert lifetime == dt.timedelta(days=365), name
        assert (
            dt.timedelta(minutes=55)
            < dt.datetime.now(dt.UTC) - leaf.not_valid_before_utc
            < dt.timedelta(hours=2)
        )
    ours_leaf, ref_leaf = chains["ours"][0], chains["reference"][0]
    sans = [
        leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        for leaf in (ours_leaf, ref_leaf)
    ]
    assert sans[0] == sans[1]
    assert [str(ip) for ip in sans[0].get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "127.0.0.1"]
    assert sans[0].get_values_for_type(x509.DNSName) == ["localhost"]
    for ext in (x509.KeyUsage, x509.ExtendedKeyUsage, x509.BasicConstraints):
        assert ours_leaf.extensions.get_extension_for_class(
            ext
        ) == ref_leaf.extensions.get_extension_for_class(ext)
    # The served certificate verifies against the CA it is sent with, for localhost.
    ca_pem = chains["ours"][1].public_bytes(serialization.Encoding.PEM).decode()
    context = ssl.create_default_context(cadata=ca_pem)
    sock = socket.create_connection(("127.0.0.1", cluster.ours.port), timeout=10)
    with context.wrap_socket(sock, server_hostname="localhost") as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_review_answers_are_cached_for_their_ttl(cluster: Cluster) -> None:
    """Our standby runs with 2 s caches: a binding withdrawn still allows, and one added still
    denies, until the answer cached at the first request expires (the apiserver's RBAC sees either
    change at once, so an uncached review would answer otherwise)."""
    plane, standby = cluster.plane, cluster.standby
    temp, late = cluster.tokens["temp"], cluster.tokens["late"]
    first = time.monotonic()
    assert standby.get("/metrics", temp).status == 200  # reviewed: allowed, cached 2 s
    assert standby.get("/metrics", late).status == 403  # reviewed: denied, cached 2 s
    plane.kubectl("delete", "clusterrolebinding", "serving-temp")
    _bind_reader(plane, "serving-late", {"kind": "ServiceAccount", "name": "late", "namespace": NS})
    assert standby.get("/metrics", temp).status == 200
    assert standby.get("/metrics", late).status == 403
    assert time.monotonic() - first < 1.8, "too slow to be within the TTL"
    wait_for(lambda: standby.get("/metrics", temp).status == 403, 15, what="the withdrawn binding denies")
    wait_for(lambda: standby.get("/metrics", late).status == 200, 15, what="the added binding allows")
    assert time.monotonic() - first >= 2.0


def test_a_port_in_use_stops_both_at_start_with_the_same_words(cluster: Cluster, tmp_path: Path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        config = tmp_path / "c.yaml"
        config.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            f"clientConnection: {{kubeconfig: {cluster.plane.kubeconfig}}}\n"
        )
        common = [f"--config={config}", f"--secure-port={port}", "--bind-address=127.0.0.1"]
        ref = subprocess.run(
            [str(cluster.plane.bin_path), "kube-scheduler", *common],
            capture_output=True,
            text=True,
            timeout=60,
        )
        ours = subprocess.run(
            [sys.executable, "-m", "kopf_scheduler", "run", *common],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
    finally:
        busy.close()
    where = f"127.0.0.1:{port}"
    words = f"failed to create listener: failed to listen on {where}: listen tcp {where}: bind: "
    words += "address already in use"
    assert ref.returncode == 1 and words in ref.stderr, ref.stderr[-2000:]
    assert ours.returncode == 1 and words in ours.stderr, ours.stderr[-2000:]
