"""A real local control plane: etcd and kube-apiserver on loopback, built by the project.

The Go module in ``tests/controlplane`` links etcd, kube-apiserver, the reference kube-scheduler and
kubectl into one multi-call binary (``kcp``) at pinned versions. It is built once per version and
cached under ``~/.cache/kopf-scheduler/``; starting a warm control plane then takes seconds.

Used by the tests (a pytest fixture), the playground and the benchmarks. Children are started in
their own process group with a parent-death signal, so nothing outlives the Python process that
started it, even when a test fails or is killed.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from kopf_scheduler_workbench.processes import die_with_parent, free_port, stop_group

__all__ = ["ControlPlane", "build", "find_module_dir", "running_control_plane"]

ADMIN_TOKEN_USER = "kopf-scheduler-admin"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"  # bound by the bootstrap RBAC policy


def find_module_dir() -> Path:
    """The Go module: ``$KOPF_SCHEDULER_CONTROLPLANE_SRC`` or ``tests/controlplane`` of this checkout."""
    env = os.environ.get("KOPF_SCHEDULER_CONTROLPLANE_SRC")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "tests" / "controlplane" / "go.mod"
        if candidate.is_file():
            return candidate.parent
    raise FileNotFoundError(
        "the control-plane Go module (tests/controlplane) was not found; run from a checkout of "
        "kopf-scheduler or set KOPF_SCHEDULER_CONTROLPLANE_SRC"
    )


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kopf-scheduler"


def _source_digest(module_dir: Path) -> str:
    digest = hashlib.sha256()
    for rel in ("go.mod", "go.sum", "cmd/kcp/main.go"):
        digest.update((module_dir / rel).read_bytes())
    return digest.hexdigest()[:12]


def pinned_versions(module_dir: Path | None = None) -> dict[str, str]:
    """Kubernetes and etcd versions as pinned in go.mod."""
    text = (module_dir or find_module_dir()).joinpath("go.mod").read_text()
    versions: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "k8s.io/kubernetes":
            versions["kubernetes"] = parts[1]
        if len(parts) >= 2 and parts[0] == "go.etcd.io/etcd/server/v3":
            versions["etcd"] = parts[1]
    return versions


def build(*, verbose: bool = True) -> Path:
    """Build (or reuse) the multi-call binary; return its path."""
    module_dir = find_module_dir()
    versions = pinned_versions(module_dir)
    target_dir = _cache_root() / f"kcp-{versions.get('kubernetes', 'unknown')}-{_source_digest(module_dir)}"
    binary = target_dir / "kcp"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    target_dir.mkdir(parents=True, exist_ok=True)
    # One build at a time per version: a second caller (another test process) waits, then reuses it.
    with open(target_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
        _go_build(module_dir, target_dir, binary, versions, verbose)
    return binary


def _go_build(
    module_dir: Path, target_dir: Path, binary: Path, versions: dict[str, str], verbose: bool
) -> None:
    go = shutil.which("go")
    if not go:
        raise RuntimeError(
            "Go is needed to build the local control plane (tests/controlplane); install Go >= 1.25"
        )
    tmp = target_dir / f"kcp.tmp-{os.getpid()}"
    if verbose:
        print(
            f"building the control plane {versions} (first run only; cached in {target_dir})", file=sys.stderr
        )
    started = time.monotonic()
    subprocess.run([go, "build", "-o", str(tmp), "./cmd/kcp"], cwd=module_dir, check=True)
    tmp.replace(binary)
    if verbose:
        print(f"built {binary} in {time.monotonic() - started:.0f}s", file=sys.stderr)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _kubeconfig(server: str, user: str, token: str, ca_pem: bytes) -> str:
    cluster = {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": cluster}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
            "current-context": user,
        },
        indent=2,
    )


class ControlPlane:
    """etcd + kube-apiserver on free loopback ports, with RBAC on and an admin kubeconfig; with
    ``controllers``, kube-controller-manager too (ResourceClaimTemplates become claims, ReplicaSets
    make pods, PDBs get a status, as in a real cluster). ``apiserver_args`` come after the
    defaults, so a flag given there wins (e.g. ``--etcd-compaction-interval=1s``)."""

    def __init__(
        self,
        binary: Path | None = None,
        workdir: Path | None = None,
        *,
        log_to_files: bool = True,
        controllers: bool = False,
        workloads: bool = False,
        apiserver_args: Sequence[str] = (),
        controller_qps: float | None = None,
    ) -> None:
        self.bin_path = binary or build()
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="kopf-scheduler-cp-"))
        self.log_to_files = log_to_files
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.admin_token = hashlib.sha256(os.urandom(32)).hexdigest()
        self.controllers = controllers
        self.workloads = workloads
        self.apiserver_args = list(apiserver_args)
        # kube-controller-manager's client QPS and burst (None: its defaults, 20 and 30).
        self.controller_qps = controller_qps
        self.controller_token = hashlib.sha256(os.urandom(32)).hexdigest()
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.ca_pem = b""
        self.start_seconds = 0.0

    # -- lifecycle --

    def start(self, timeout: float = 120.0) -> ControlPlane:
        started = time.monotonic()
        self._write_credentials()
        self.start_etcd()
        self.start_apiserver()
        self.wait_ready(timeout)
        if self.controllers:
            self.start_controller_manager()
            self.wait_controllers(timeout)
        self.start_seconds = time.monotonic() - started
        return self

    def _spawn(self, name: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        log_path = self.workdir / f"{name}.log" if self.log_to_files else Path(os.devnull)
        with open(log_path, "ab") as log:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                [str(self.bin_path), *args], stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
            )
        self.processes[name] = proc
        return proc

    def _write_credentials(self) -> None:
        certs = self.workdir / "certs"
        certs.mkdir(exist_ok=True)
        key = certs / "sa.key"
        if not key.exists():
            _openssl("genrsa", "-out", str(key), "2048")
            _openssl("rsa", "-in", str(key), "-pubout", "-out", str(certs / "sa.pub"))
        if not (certs / "ca.crt").exists():
            # A CA of our own and a serving certificate for 127.0.0.1, so every client verifies TLS
            # exactly as it would against a real cluster (no insecure-skip-tls-verify anywhere).
            _openssl(
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "3650",
                "-subj",
                "/CN=kopf-scheduler-local-ca",
                "-keyout",
                str(certs / "ca.key"),
                "-out",
                str(certs / "ca.crt"),
            )
            _openssl(
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=kube-apiserver",
                "-keyout",
                str(certs / "serving.key"),
                "-out",
                str(certs / "serving.csr"),
            )
            (certs / "serving.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
            _openssl(
                "x509",
                "-req",
                "-in",
                str(certs / "serving.csr"),
                "-CA",
                str(certs / "ca.crt"),
                "-CAkey",
                str(certs / "ca.key"),
                "-CAcreateserial",
                "-days",
                "3650",
                "-extfile",
                str(certs / "serving.ext"),
                "-out",
                str(certs / "serving.crt"),
            )
        self.ca_pem = (certs / "ca.crt").read_bytes()
        (self.workdir / "tokens.csv").write_text(
            f'{self.admin_token},{ADMIN_TOKEN_USER},1,"system:masters"\n'
            f"{self.controller_token},{CONTROLLER_MANAGER_USER},2\n"
        )
        self.kubeconfig.write_text(_kubeconfig(self.server, ADMIN_TOKEN_USER, self.admin_token, self.ca_pem))

    def start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self._spawn(
            "etcd",
            [
                "etcd",
                "--name=default",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync=true",  # test data; fsync dominates latency on a shared disk
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
        )

    def start_apiserver(self) -> None:
        certs = self.workdir / "certs"
        self._spawn(
            "kube-apiserver",
            [
                "kube-apiserver",
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",  # loopback cannot back the kubernetes Service
                f"--secure-port={self.port}",
                f"--tls-cert-file={certs / 'serving.crt'}",
                f"--tls-private-key-file={certs / 'serving.key'}",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={certs / 'sa.pub'}",
                f"--service-account-signing-key-file={certs / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--api-audiences=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/16",
                # No controller-manager runs here, so nothing would create the default ServiceAccounts
                # that this admission plugin insists on for every pod.
                # Nor does the node-lifecycle controller run, which would lift the not-ready taint
                # that TaintNodesByCondition puts on every new node; without it no node could be used.
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                "--allow-privileged=true",
                *self.workload_args(),
                "--v=0",
                *self.apiserver_args,
            ],
        )

    def workload_args(self) -> list[str]:
        """With ``workloads``: the GenericWorkload gate (beta, off by default in v1.37) and the
        ``scheduling.k8s.io/v1beta1`` API that serves PodGroups; the reference kube-scheduler run
        against this plane needs the same gate (``feature_gates``)."""
        if not self.workloads:
            return []
        return [f"--feature-gates={self.feature_gates()}", "--runtime-config=scheduling.k8s.io/v1beta1=true"]

    def feature_gates(self) -> str:
        return "GenericWorkload=true" if self.workloads else ""

    def start_controller_manager(self) -> None:
        """kube-controller-manager as ``system:kube-controller-manager`` (its bootstrap RBAC role),
        each controller with its own ServiceAccount's token, as kubeadm runs it.

        Node lifecycle is off: no kubelet heartbeats here, so it would taint every node unreachable.
        """
        config = self.workdir / "controller-manager.kubeconfig"
        config.write_text(
            _kubeconfig(self.server, CONTROLLER_MANAGER_USER, self.controller_token, self.ca_pem)
        )
        self._spawn("kube-controller-manager", self.controller_manager_args(config))

    def controller_manager_args(self, config: Path) -> list[str]:
        certs, qps = self.workdir / "certs", self.controller_qps
        return [
            "kube-controller-manager",
            f"--kubeconfig={config}",
            f"--authentication-kubeconfig={config}",
            f"--authorization-kubeconfig={config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={certs / 'sa.key'}",
            f"--root-ca-file={certs / 'ca.crt'}",
            "--controllers=*,-node-lifecycle-controller,-node-ipam-controller",
            "--leader-elect=false",
            *([f"--feature-gates={self.feature_gates()}"] if self.workloads else []),
            *([f"--kube-api-qps={qps:g}", f"--kube-api-burst={int(qps)}"] if qps else []),
            "--v=0",
        ]

    def wait_controllers(self, timeout: float = 120.0) -> None:
        """Until the ServiceAccount controller has made ``default`` in ``default`` (controllers run)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self.processes.get("kube-controller-manager")
            if proc is not None and proc.poll() is not None:
                log = self.tail_log("kube-controller-manager")
                raise RuntimeError(f"kube-controller-manager exited with {proc.returncode}:\n{log}")
            with contextlib.suppress(subprocess.CalledProcessError):
                self.kubectl("get", "serviceaccount", "default", "-n", "default")
                return
            time.sleep(0.5)
        raise TimeoutError(
            f"controllers not running after {timeout}s:\n{self.tail_log('kube-controller-manager')}"
        )

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        last = ""
        while time.monotonic() < deadline:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.tail_log(name)}")
            request = urllib.request.Request(
                f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.admin_token}"}
            )
            try:
                with urllib.request.urlopen(request, context=ctx, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise TimeoutError(
            f"kube-apiserver not ready after {timeout}s ({last}):\n{self.tail_log('kube-apiserver')}"
        )

    def tail_log(self, name: str, lines: int = 30) -> str:
        path = self.workdir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop_process(self, name: str, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        proc = self.processes.pop(name, None)
        if proc is not None:
            stop_group(proc, sig, timeout)

    def restart_apiserver(self) -> None:
        """Stop and start kube-apiserver on the same port and etcd (for fault tests)."""
        self.stop_process("kube-apiserver")
        self.start_apiserver()
        self.wait_ready()

    def stop(self) -> None:
        for name in ("kube-controller-manager", "kube-apiserver", "etcd", *list(self.processes)):
            self.stop_process(name)
        if self._own_workdir and not os.environ.get("KOPF_SCHEDULER_KEEP_CP"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients --

    def kubectl(self, *args: str, input: str | None = None, kubeconfig: Path | str | None = None) -> str:
        """kubectl at the pinned version; raises CalledProcessError (with stderr) on failure."""
        result = subprocess.run(
            [str(self.bin_path), "kubectl", f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, result.args, result.stdout, result.stderr)
        return result.stdout

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        """A kubeconfig that acts as ServiceAccount ``namespace/name`` (created if missing)."""
        manifest = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": namespace},
                },
            ],
        }
        self.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        token = self.kubectl("create", "token", name, "-n", namespace, "--duration=24h").strip()
        path = self.workdir / f"sa-{namespace}-{name}.kubeconfig"
        path.write_text(
            _kubeconfig(self.server, f"system:serviceaccount:{namespace}:{name}", token, self.ca_pem)
        )
        return path

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}


@contextlib.contextmanager
def running_control_plane(*, controllers: bool = False, workloads: bool = False) -> Iterator[ControlPlane]:
    plane = ControlPlane(controllers=controllers, workloads=workloads)
    try:
        yield plane.start()
    finally:
        plane.stop()


# -- the `kopf-scheduler controlplane` subcommand ----------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", choices=["build", "up", "versions"], help="build the binary, run one, or show versions"
    )
    parser.add_argument(
        "--controllers",
        action="store_true",
        help="up: also run kube-controller-manager (ResourceClaimTemplates, ReplicaSets, PDB status)",
    )
    parser.add_argument(
        "--workloads",
        action="store_true",
        help="up: GenericWorkload on and scheduling.k8s.io/v1beta1 served (PodGroups, gang scheduling)",
    )


def run(args: argparse.Namespace) -> int:
    if args.action == "versions":
        print(json.dumps(pinned_versions()))
        return 0
    started = time.monotonic()
    binary = build()
    if args.action == "build":
        print(f"{binary} ({time.monotonic() - started:.1f}s)")
        return 0
    with running_control_plane(controllers=args.controllers, workloads=args.workloads) as plane:
        print(f"control plane ready in {plane.start_seconds:.1f}s at {plane.server}")
        print(f"export KUBECONFIG={plane.kubeconfig}")
        print("Ctrl-C stops it.", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while all(p.poll() is None for p in plane.processes.values()):
                time.sleep(1)
    return 0
