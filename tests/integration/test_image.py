"""The built image, run as the Deployment runs it, against the local control plane (opt-in).

Opt in with ``KOPF_SCHEDULER_IMAGE_TEST=1`` (``.ci/run`` does, and ``scripts/test`` then runs
``scripts/image setup``); skipped with the reason where podman is missing. The test builds the
image with ``scripts/image`` (the README's install path), then starts containers with the
Deployment's args, env, user, read-only root and dropped capabilities, and the manifests'
ServiceAccount token, CA and namespace mounted where the kubelet mounts them, so the scheduler
finds its credentials in-cluster.

One deviation, forced by running without a pod network: the containers share the host's network
namespace (the apiserver listens on loopback and its certificate names 127.0.0.1), so each replica
gets its own ``--secure-port`` instead of 10259, and the probes (HTTPS, as the Deployment's) follow
it; each also gets a plain ``--metrics-port`` of its own, where the test reads ``/metrics``.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopf_scheduler_workbench.controlplane import ControlPlane

from .charthelpers import CONFIG_PATH, build_helm, docs, render, values_file
from .test_operator_helpers import (
    ROOT,
    create,
    deploy,
    free_port,
    fresh_namespace,
    node,
    node_of,
    pod,
    reason_events,
    wait_for,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.environ.get("KOPF_SCHEDULER_IMAGE_TEST") != "1",
        reason="image test is opt-in: KOPF_SCHEDULER_IMAGE_TEST=1 (.ci/run sets it)",
    ),
    pytest.mark.skipif(
        shutil.which("podman") is None,
        reason="podman is not installed (scripts/image setup installs podman, runc and mmdebstrap)",
    ),
]

IMAGE = "kopf-scheduler:0.1.0"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kopf-scheduler" / "image"


def _podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTAINERS_CONF": str(CACHE / "containers.conf")}
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, env=env, check=check, timeout=timeout
    )


def _manifests_pod_spec() -> dict[str, Any]:
    dep = yaml.safe_load((ROOT / "manifests" / "20-deployment.yaml").read_text())
    spec: dict[str, Any] = dep["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def image() -> dict[str, Any]:
    """Build with scripts/image (base cached across runs); its timing line is kept for the log."""
    started = time.monotonic()
    out = subprocess.run(
        [str(ROOT / "scripts" / "image"), "build"], capture_output=True, text=True, timeout=1200, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-4000:]
    print(out.stderr.strip(), f"(scripts/image build: {time.monotonic() - started:.0f}s)")
    info = json.loads(_podman("image", "inspect", IMAGE).stdout)[0]
    return dict(info)


class Container:
    """One replica of a Deployment's pod spec (manifests/' by default) as a podman container.

    Its volumes as the kubelet makes them: an emptyDir is a tmpfs, a ConfigMap a read-only directory
    of its ``config_maps[name]`` files."""

    def __init__(
        self,
        plane: ControlPlane,
        sa_dir: Path,
        name: str,
        pod_spec: dict[str, Any] | None = None,
        config_maps: dict[str, dict[str, str]] | None = None,
    ) -> None:
        pod_spec = pod_spec or _manifests_pod_spec()
        spec = pod_spec["containers"][0]
        self.name = name
        self.port = free_port()
        self.secure_port = free_port()
        args = list(spec["args"])
        for flag in ("--metrics-port", "--secure-port"):
            if flag in args:
                del args[args.index(flag) : args.index(flag) + 2]
        args += ["--metrics-port", str(self.port), "--secure-port", str(self.secure_port)]
        ports = {p["name"]: p["containerPort"] for p in spec["ports"]}
        self.probes: dict[str, str] = {}
        for which in ("livenessProbe", "readinessProbe"):
            get = spec[which]["httpGet"]
            scheme = get.get("scheme", "HTTP").lower()
            declared = ports.get(get["port"], get["port"])
            port = self.secure_port if declared == 10259 else self.port
            self.probes[which] = f"{scheme}://127.0.0.1:{port}{get['path']}"
        env = ["--env", f"POD_ID={name}"]  # the Deployment's fieldRef metadata.name
        assert [e["name"] for e in spec["env"]] == ["POD_ID"]
        env += [
            "--env",
            "KUBERNETES_SERVICE_HOST=127.0.0.1",
            "--env",
            f"KUBERNETES_SERVICE_PORT={plane.port}",
        ]
        security = spec["securityContext"]
        pod_security = pod_spec["securityContext"]
        flags = [
            "--network=host",
            f"--user={pod_security['runAsUser']}:{pod_security['runAsGroup']}",
            f"--volume={sa_dir}:{SA_DIR}:ro",
            f"--stop-timeout={pod_spec['terminationGracePeriodSeconds']}",
        ]
        volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
        for mount in spec.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            if "emptyDir" in volume:
                flags.append(f"--tmpfs={mount['mountPath']}")
            else:  # a ConfigMap: its files, readable by the non-root user (the kubelet's 0644)
                files = (config_maps or {})[volume["configMap"]["name"]]
                host = sa_dir.parent / f"{name}-{mount['name']}"
                host.mkdir(mode=0o755)
                for file, text in files.items():
                    (host / file).write_text(text)
                    (host / file).chmod(0o644)
                flags.append(f"--volume={host}:{mount['mountPath']}:ro")
        if security.get("readOnlyRootFilesystem"):
            flags.append("--read-only")
        if security.get("capabilities", {}).get("drop") == ["ALL"]:
            flags.append("--cap-drop=ALL")
        if security.get("allowPrivilegeEscalation") is False:
            flags.append("--security-opt=no-new-privileges")
        _podman("run", "--detach", f"--name={name}", *flags, *env, IMAGE, *args)

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def probe(self, which: str) -> bool:
        """As the kubelet probes: HTTPS without verifying the certificate (self-signed), no token."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(self.probes[which], timeout=5, context=context) as resp:
                return bool(resp.status == 200)
        except (urllib.error.HTTPError, OSError):
            return False

    def leading(self) -> bool:
        _, text = self.http("/metrics")
        return any(line.split() == ["kopf_scheduler_leader", "1.0"] for line in text.splitlines())

    def logs(self) -> str:
        out = _podman("logs", self.name, check=False)
        return (out.stdout + out.stderr)[-6000:]

    def sigterm(self) -> tuple[int, float]:
        """SIGTERM as the kubelet sends it; the exit code and the seconds it took to exit."""
        started = time.monotonic()
        _podman("kill", "--signal=TERM", self.name)
        out = _podman("wait", self.name, timeout=60)
        return int(out.stdout.strip().splitlines()[-1]), time.monotonic() - started

    def remove(self) -> None:
        _podman("rm", "--force", "--time=0", self.name, check=False)


@pytest.fixture(scope="module")
def service_account(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The manifests' ServiceAccount's token, CA and namespace, as the kubelet projects them."""
    deploy(control_plane)
    sa_dir = tmp_path_factory.mktemp("serviceaccount")
    token = control_plane.kubectl(
        "create", "token", "kopf-scheduler", "-n", "kopf-scheduler", "--duration=1h"
    )
    (sa_dir / "token").write_text(token.strip())
    (sa_dir / "ca.crt").write_bytes(control_plane.ca_pem)
    (sa_dir / "namespace").write_text("kopf-scheduler")
    sa_dir.chmod(0o755)
    for f in sa_dir.iterdir():
        f.chmod(0o644)  # readable by the non-root user, as the kubelet's default mode 0644
    return sa_dir


@pytest.fixture
def containers(
    control_plane: ControlPlane, service_account: Path, image: dict[str, Any]
) -> Iterator[list[Container]]:
    started: list[Container] = []
    yield started
    for c in started:
        c.remove()


def _scheduled_by(plane: ControlPlane, ns: str, name: str) -> str:
    events = reason_events(plane, ns, name, "Scheduled")
    return str(events[0].get("reportingInstance") or "") if events else ""


def test_image_is_non_root_with_the_dockerfile_entrypoint(image: dict[str, Any]) -> None:
    config = image["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["kopf-scheduler"]
    print(f"image size: {image['Size'] / 1e6:.0f} MB")


def test_image_runs_as_the_deployment_binds_and_hands_over(
    control_plane: ControlPlane, service_account: Path, containers: list[Container]
) -> None:
    plane = control_plane
    ns = fresh_namespace(plane, "image")
    label = {"image-test": ns}
    create(plane, node(f"{ns}-n1", labels=label))
    suffix = uuid.uuid4().hex[:5]

    first = Container(plane, service_account, f"kopf-scheduler-a-{suffix}")
    containers.append(first)
    wait_for(
        lambda: first.probe("readinessProbe") and first.leading(), 90, what=f"first ready:\n{first.logs()}"
    )
    assert first.probe("livenessProbe")
    create(plane, pod("p1", ns, node_selector=label))
    wait_for(lambda: node_of(plane, ns, "p1"), 30, what=f"p1 bound:\n{first.logs()}")

    second = Container(plane, service_account, f"kopf-scheduler-b-{suffix}")
    containers.append(second)
    wait_for(lambda: second.probe("readinessProbe"), 90, what=f"second ready:\n{second.logs()}")
    assert second.probe("livenessProbe") and not second.leading()
    create(plane, pod("p2", ns, node_selector=label))
    wait_for(lambda: node_of(plane, ns, "p2"), 30, what="p2 bound")
    for name in ("p1", "p2"):  # only the leader binds
        who = wait_for(lambda n=name: _scheduled_by(plane, ns, n), 30, what=f"Scheduled event of {name}")
        assert who == f"kopf-scheduler-{first.name}"

    code, seconds = first.sigterm()
    assert code == 0 and seconds < 30, first.logs()
    assert "Traceback" not in first.logs()
    wait_for(second.leading, 60, what=f"second takes over:\n{second.logs()}")
    create(plane, pod("p3", ns, node_selector=label))
    wait_for(lambda: node_of(plane, ns, "p3"), 30, what=f"p3 bound after the handover:\n{second.logs()}")
    assert wait_for(lambda: _scheduled_by(plane, ns, "p3"), 30) == f"kopf-scheduler-{second.name}"

    code, seconds = second.sigterm()
    assert code == 0 and seconds < 30, second.logs()
    assert "Traceback" not in second.logs()


def test_chart_deployment_with_a_config_file_runs_and_binds(
    control_plane: ControlPlane, service_account: Path, containers: list[Container], tmp_path: Path
) -> None:
    """The chart's pod spec (helm template; release kopf-scheduler: the manifests' ServiceAccount,
    which has the chart's RBAC) with ``config`` set: the file's profile binds a pod."""
    plane = control_plane
    ns = fresh_namespace(plane, "image-chart")
    label = {"image-test": ns}
    create(plane, node(f"{ns}-n1", labels=label))
    values = {
        "peering": f"image-chart-{ns}",
        "config": {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": f"{ns}-file"}],
        },
    }
    objs = docs(render(build_helm(), "-f", values_file(tmp_path, values)))
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    config_maps = {o["metadata"]["name"]: o["data"] for o in objs if o["kind"] == "ConfigMap"}
    pod_spec = deployment["spec"]["template"]["spec"]
    assert CONFIG_PATH in pod_spec["containers"][0]["args"]

    replica = Container(plane, service_account, f"kopf-scheduler-chart-{ns}", pod_spec, config_maps)
    containers.append(replica)
    wait_for(
        lambda: replica.probe("readinessProbe") and replica.leading(), 90, what=f"ready:\n{replica.logs()}"
    )
    create(plane, pod("p1", ns, scheduler=f"{ns}-file", node_selector=label))
    wait_for(lambda: node_of(plane, ns, "p1"), 30, what=f"p1 bound:\n{replica.logs()}")
    who = wait_for(lambda: _scheduled_by(plane, ns, "p1"), 30, what="Scheduled event of p1")
    assert who == f"kopf-scheduler-{replica.name}", who
    code, seconds = replica.sigterm()
    assert code == 0 and seconds < 30, replica.logs()
    assert "Traceback" not in replica.logs()
