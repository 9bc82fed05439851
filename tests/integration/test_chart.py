"""The Helm chart (charts/kopf-scheduler) with a real helm, against the local control plane.

helm is built from the Go module proxy at the version ``tests/helm/go.mod`` pins and cached
(``scripts/helm build``; ``scripts/test`` builds it first). The chart and the plain manifests are held
together here: with its default values, a release named ``kopf-scheduler`` in namespace
``kopf-scheduler`` renders the objects of ``crds/`` and ``manifests/`` field for field, less the
Namespace (``helm install --create-namespace`` makes it) and the two labels only Helm sets.

Releases here get a namespace and a name of their own; the CRDs are cluster-scoped and the same
files as ``crds/``, which other tests apply too: Helm leaves CRDs that already exist as they are,
and ``helm uninstall`` keeps them, so both orders coexist.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopf_scheduler_workbench.controlplane import ControlPlane

from .charthelpers import CHART, CONFIG_PATH, build_helm, docs, render, run_helm, values_file
from .test_operator_helpers import (
    ROOT,
    create,
    free_port,
    get_json,
    node,
    node_of,
    pod,
    wait_for,
)

pytestmark = pytest.mark.integration

HELM_ONLY_LABELS = {"helm.sh/chart": "kopf-scheduler-0.1.0", "app.kubernetes.io/managed-by": "Helm"}


@pytest.fixture(scope="session")
def helm() -> Path:
    return build_helm()


def key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


# --- the chart against manifests/ (no cluster) -------------------------------------------------------


def test_chart_crds_are_the_repositorys() -> None:
    chart_crds = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert chart_crds == sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    for name in chart_crds:
        assert (CHART / "crds" / name).read_text() == (ROOT / "crds" / name).read_text(), (
            f"charts/kopf-scheduler/crds/{name} differs from crds/{name}: "
            "cp crds/*.yaml charts/kopf-scheduler/crds/"
        )


def test_chart_with_default_values_renders_the_manifests(helm: Path) -> None:
    """Object by object, field by field: a change to one that the other lacks fails here."""
    rendered = {}
    for obj in docs(render(helm, "--include-crds")):
        labels = obj["metadata"].get("labels") or {}
        if obj["kind"] != "CustomResourceDefinition":
            for label, value in HELM_ONLY_LABELS.items():
                assert labels.pop(label, None) == value, (key(obj), label)
        rendered[key(obj)] = obj
    files = [*sorted((ROOT / "crds").glob("*.yaml")), *sorted((ROOT / "manifests").glob("*.yaml"))]
    plain = {key(obj): obj for path in files for obj in docs(path.read_text())}
    assert plain.pop(("Namespace", "", "kopf-scheduler"))["kind"] == "Namespace"
    assert sorted(rendered) == sorted(plain)
    for k, obj in plain.items():
        assert rendered[k] == obj, f"{k}: the chart renders something else than manifests/"
    kinds = {k[0] for k in rendered}
    assert {"Deployment", "PodDisruptionBudget", "Service", "ClusterRole"} <= kinds


def test_kustomization_lists_every_manifest() -> None:
    resources = yaml.safe_load((ROOT / "kustomization.yaml").read_text())["resources"]
    files = [*sorted((ROOT / "crds").glob("*.yaml")), *sorted((ROOT / "manifests").glob("*.yaml"))]
    assert resources == [str(p.relative_to(ROOT)) for p in files]


def test_helm_lint_is_clean(helm: Path, tmp_path: Path) -> None:
    for values in ({}, full_values("lint")):
        out = run_helm(helm, "lint", "--strict", str(CHART), "-f", values_file(tmp_path, values))
        assert "0 chart(s) failed" in out, out
        assert "[WARNING]" not in out and "[ERROR]" not in out, out


def full_values(name: str, namespace: str = "kopf-scheduler") -> dict[str, Any]:
    """Every knob of values.yaml turned away from its default."""
    return {
        "image": {
            "repository": "registry.example.com/kopf-scheduler",
            "tag": "9.9.9",
            "pullPolicy": "Always",
        },
        "imagePullSecrets": [{"name": "pull"}],
        "replicas": 3,
        "peering": f"{name}-peering",
        "securePort": 9443,
        "metricsPort": 9090,
        "extraArgs": ["--namespace", namespace, "-v", "2"],
        "extraEnv": [{"name": "EXTRA", "value": "1"}],
        "config": {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": f"{name}-file"}],
        },
        "schedulerProfiles": [
            {
                "name": f"{name}-binpack",
                "spec": {
                    "schedulerName": f"{name}-binpack",
                    "pluginConfig": [
                        {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
                    ],
                },
            }
        ],
        "serviceAccount": {"name": f"{name}-sa", "annotations": {"example.com/role": "scheduler"}},
        "priorityClassName": "",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": None},  # null drops a default
        "podDisruptionBudget": {"enabled": False},
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
                            ]
                        }
                    ]
                }
            }
        },
        "podAnnotations": {"example.com/a": "b"},
        "podLabels": {"team": "platform"},
        "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prom"}},
    }


def test_values_reach_the_objects(helm: Path, tmp_path: Path) -> None:
    values = full_values("v", "team-a")
    objs = {
        (o["kind"], o["metadata"]["name"]): o for o in docs(render(helm, "-f", values_file(tmp_path, values)))
    }
    assert ("PodDisruptionBudget", "kopf-scheduler") not in objs
    dep = objs[("Deployment", "kopf-scheduler")]
    spec = dep["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert dep["spec"]["replicas"] == 3
    assert container["image"] == "registry.example.com/kopf-scheduler:9.9.9"
    assert container["imagePullPolicy"] == "Always"
    assert container["args"] == [
        "run",
        "--peering",
        "v-peering",
        "--secure-port",
        "9443",
        "--metrics-port",
        "9090",
        "--config",
        CONFIG_PATH,
        "--namespace",
        "team-a",
        "-v",
        "2",
    ]
    assert container["ports"] == [
        {"name": "https", "containerPort": 9443},
        {"name": "http", "containerPort": 9090},
    ]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == "https"
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    assert {"name": "EXTRA", "value": "1"} in container["env"]
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"}}
    assert "priorityClassName" not in spec
    assert spec["serviceAccountName"] == "v-sa"
    assert spec["imagePullSecrets"] == [{"name": "pull"}]
    for field in ("nodeSelector", "tolerations", "affinity"):
        assert spec[field] == values[field]
    template_meta = dep["spec"]["template"]["metadata"]
    assert template_meta["labels"]["team"] == "platform"
    assert template_meta["annotations"]["example.com/a"] == "b"
    # The configuration: a ConfigMap mounted where --config reads it, and a checksum that rolls the pods.
    config_map = objs[("ConfigMap", "kopf-scheduler-config")]
    assert yaml.safe_load(config_map["data"]["config.yaml"]) == values["config"]
    assert {"name": "config", "mountPath": "/etc/kopf-scheduler", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert {"name": "config", "configMap": {"name": "kopf-scheduler-config"}} in spec["volumes"]
    checksum = template_meta["annotations"]["kopfscheduler.io/config-checksum"]
    values["config"]["profiles"][0]["schedulerName"] = "other"
    changed = docs(render(helm, "-f", values_file(tmp_path, values)))
    dep2 = next(o for o in changed if o["kind"] == "Deployment")
    assert dep2["spec"]["template"]["metadata"]["annotations"]["kopfscheduler.io/config-checksum"] != checksum
    # Profiles, ServiceAccount, ServiceMonitor, Service.
    profile = objs[("SchedulerProfile", "v-binpack")]
    assert profile["spec"] == values["schedulerProfiles"][0]["spec"]
    assert "namespace" not in profile["metadata"]  # cluster-scoped
    assert objs[("ServiceAccount", "v-sa")]["metadata"]["annotations"] == {"example.com/role": "scheduler"}
    binding = objs[("ClusterRoleBinding", "kopf-scheduler")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "v-sa", "namespace": "kopf-scheduler"}]
    monitor = objs[("ServiceMonitor", "kopf-scheduler")]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"] == [
        {
            "port": "https",
            "path": "/metrics",
            "interval": "15s",
            "scheme": "https",
            "tlsConfig": {"insecureSkipVerify": True},
            "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
        }
    ]
    service = objs[("Service", "kopf-scheduler-metrics")]
    assert monitor["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert service["spec"]["ports"][0]["port"] == 9443
    assert service["metadata"]["annotations"]["prometheus.io/port"] == "9443"
    delegator = objs[("ClusterRoleBinding", "kopf-scheduler:auth-delegator")]
    assert delegator["subjects"] == binding["subjects"]
    reader = objs[("RoleBinding", "kopf-scheduler:extension-apiserver-authentication-reader")]
    assert reader["metadata"]["namespace"] == "kube-system" and reader["subjects"] == binding["subjects"]


def test_rendered_config_is_accepted_by_run(helm: Path, tmp_path: Path) -> None:
    """The ConfigMap's file, as the pod reads it, passes ``run --config``'s validation."""
    values = {"config": full_values("cfg")["config"]}
    config_map = next(
        o for o in docs(render(helm, "-f", values_file(tmp_path, values))) if o["kind"] == "ConfigMap"
    )
    path = tmp_path / "config.yaml"
    path.write_text(config_map["data"]["config.yaml"])
    written = tmp_path / "written.yaml"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kopf_scheduler",
            "run",
            "--config",
            str(path),
            "--write-config-to",
            str(written),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert [p["schedulerName"] for p in yaml.safe_load(written.read_text())["profiles"]] == ["cfg-file"]


# --- against the apiserver ---------------------------------------------------------------------------


def apply_crds(plane: ControlPlane) -> None:
    plane.kubectl("apply", "-f", str(ROOT / "crds"))
    plane.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/schedulerprofiles.kopfscheduler.io",
        "crd/clusterkopfpeerings.kopf.dev",
    )


def test_template_is_accepted_by_the_apiserver(
    control_plane: ControlPlane, helm: Path, tmp_path: Path
) -> None:
    plane = control_plane
    apply_crds(plane)
    ns = f"chart-dry-{uuid.uuid4().hex[:6]}"
    plane.kubectl("create", "namespace", ns)
    values = full_values(ns, ns)
    values["serviceMonitor"]["enabled"] = False  # its CRD (Prometheus Operator's) is not served here
    for args in ([], ["-f", values_file(tmp_path, values)]):
        text = render(helm, "--include-crds", *args, release=f"dry-{ns}", namespace=ns)
        out = plane.kubectl("apply", "--dry-run=server", "-f", "-", input=text)
        lines = out.splitlines()
        assert len(lines) == len(docs(text)) and all("(server dry run)" in line for line in lines), out
    # The system class the Deployment names exists and outranks every pod it schedules by default.
    assert get_json(plane, "priorityclass", "system-cluster-critical")["value"] == 2000000000


class Release:
    """A helm release of the chart in a namespace of its own, and a local replica of its Deployment."""

    def __init__(self, plane: ControlPlane, helm: Path, tmp_path: Path) -> None:
        self.plane, self.helm, self.tmp_path = plane, helm, tmp_path
        suffix = uuid.uuid4().hex[:6]
        self.name = f"rel-{suffix}"
        self.namespace = f"chart-{suffix}"
        self.fullname = f"{self.name}-kopf-scheduler"
        self.proc: subprocess.Popen[bytes] | None = None

    def values(self, *, profile_strategy: str = "MostAllocated", replicas: int = 2) -> dict[str, Any]:
        return {
            "replicas": replicas,
            "extraArgs": ["--namespace", self.namespace],
            "config": {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "profiles": [{"schedulerName": f"{self.name}-file"}],
            },
            "schedulerProfiles": [
                {
                    "name": f"{self.name}-live",
                    "spec": {
                        "schedulerName": f"{self.name}-live",
                        "pluginConfig": [
                            {
                                "name": "NodeResourcesFit",
                                "args": {"scoringStrategy": {"type": profile_strategy}},
                            }
                        ],
                    },
                }
            ],
        }

    def helm_run(self, *args: str) -> str:
        return run_helm(self.helm, *args, plane=self.plane)

    def install(self, values: dict[str, Any]) -> str:
        return self.helm_run(
            "install",
            self.name,
            str(CHART),
            "--namespace",
            self.namespace,
            "--create-namespace",
            "-f",
            values_file(self.tmp_path, values),
        )

    def upgrade(self, values: dict[str, Any]) -> str:
        return self.helm_run(
            "upgrade",
            self.name,
            str(CHART),
            "--namespace",
            self.namespace,
            "-f",
            values_file(self.tmp_path, values),
        )

    def manifest(self) -> list[dict[str, Any]]:
        return docs(self.helm_run("get", "manifest", self.name, "--namespace", self.namespace))

    def exists(self, obj: dict[str, Any]) -> bool:
        kind, namespace, name = key(obj)
        group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
        resource = f"{kind.lower()}.{group}" if group else kind.lower()
        args = ["get", resource, name, "--ignore-not-found", "-o", "name"]
        return bool(self.plane.kubectl(*args, *(["-n", namespace] if namespace else [])).strip())

    def deployment_container(self) -> dict[str, Any]:
        dep = get_json(self.plane, "deployment", self.fullname, "-n", self.namespace)
        container: dict[str, Any] = dep["spec"]["template"]["spec"]["containers"][0]
        return container

    def start_replica(self) -> None:
        """The Deployment's container as a local process: its args and env, the ConfigMap's file where it
        is mounted, the release's ServiceAccount's token (no kubelet runs here to start the pod)."""
        container = self.deployment_container()
        args = list(container["args"])
        config = get_json(self.plane, "configmap", f"{self.fullname}-config", "-n", self.namespace)
        config_path = self.tmp_path / "config.yaml"
        config_path.write_text(config["data"]["config.yaml"])
        args[args.index(CONFIG_PATH)] = str(config_path)
        # A plain port of its own for the test's reads; the secure port stays off (conftest), or on a
        # free port where the values name one.
        self.port = free_port()
        for flag in ("--metrics-port", "--secure-port"):
            if flag in args:
                del args[args.index(flag) : args.index(flag) + 2]
        args += ["--metrics-port", str(self.port)]
        sa = get_json(self.plane, "deployment", self.fullname, "-n", self.namespace)["spec"]["template"][
            "spec"
        ]["serviceAccountName"]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["POD_ID"] = f"{self.fullname}-local"
        env["KOPF_SCHEDULER_KUBECONFIG"] = str(self.service_account_kubeconfig(sa))
        self.log_path = self.tmp_path / "replica.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kopf_scheduler", *args, "--metrics-host", "127.0.0.1"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.tmp_path,
            )

    def service_account_kubeconfig(self, sa: str) -> Path:
        token = self.plane.kubectl("create", "token", sa, "-n", self.namespace, "--duration=1h").strip()
        user = f"system:serviceaccount:{self.namespace}:{sa}"
        ca = self.tmp_path / "ca.crt"
        ca.write_bytes(self.plane.ca_pem)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "local", "cluster": {"server": self.plane.server, "certificate-authority": str(ca)}}
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
            "current-context": user,
        }
        path = self.tmp_path / "sa.kubeconfig"
        path.write_text(json.dumps(config))
        return path

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:] if self.proc else ""

    def stop_replica(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def strategy(self, profile: str) -> str:
        """The scoring strategy the leader reports in force for the profile's current generation."""
        obj = get_json(self.plane, "schedulerprofile", profile)
        status = obj.get("status") or {}
        if status.get("activeGeneration") != obj["metadata"]["generation"]:
            return ""
        return str(status.get("scoreStrategy") or "")

    def cleanup(self) -> None:
        self.stop_replica()
        subprocess.run(
            [str(self.helm), "uninstall", self.name, "--namespace", self.namespace, "--wait"],
            env={**os.environ, "KUBECONFIG": str(self.plane.kubeconfig)},
            capture_output=True,
            timeout=120,
        )
        self.plane.kubectl("delete", "namespace", self.namespace, "--ignore-not-found", "--wait=false")


@pytest.fixture
def release(control_plane: ControlPlane, helm: Path, tmp_path: Path) -> Iterator[Release]:
    r = Release(control_plane, helm, tmp_path)
    try:
        yield r
    finally:
        r.cleanup()


def test_install_creates_everything_and_its_deployment_binds(release: Release) -> None:
    plane, r = release.plane, release
    r.install(r.values())
    objs = r.manifest()
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == sorted(
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRoleBinding",  # system:auth-delegator, for the secure port's reviews
            "RoleBinding",  # extension-apiserver-authentication-reader in kube-system
            "ConfigMap",
            "Service",
            "Deployment",
            "PodDisruptionBudget",
            "SchedulerProfile",
        ]
    )
    missing = [key(o) for o in objs if not r.exists(o)]
    assert not missing
    for o in objs:  # namespaced objects land in the release's namespace, nowhere else
        if o["kind"] not in ("ClusterRole", "ClusterRoleBinding", "SchedulerProfile"):
            # but the client CA reader's binding, which is where the ConfigMap is
            expected = "kube-system" if o["kind"] == "RoleBinding" else r.namespace
            assert o["metadata"]["namespace"] == expected, key(o)
    assert get_json(plane, "crd", "schedulerprofiles.kopfscheduler.io")["metadata"]["name"]
    dep = get_json(plane, "deployment", r.fullname, "-n", r.namespace)
    assert dep["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"
    pdb = get_json(plane, "pdb", r.fullname, "-n", r.namespace)
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]

    # The Deployment's pod, run as a process as its ServiceAccount: the chart's RBAC, args and
    # configuration file suffice to bind pods of the file's profile and of the SchedulerProfile.
    r.start_replica()
    label = {"chart-test": r.namespace}
    create(plane, node(f"{r.namespace}-n1", labels=label))
    create(plane, pod("p-file", r.namespace, scheduler=f"{r.name}-file", node_selector=label))
    create(plane, pod("p-live", r.namespace, scheduler=f"{r.name}-live", node_selector=label))
    for name in ("p-file", "p-live"):
        wait_for(lambda n=name: node_of(plane, r.namespace, n), 90, what=f"{name} bound:\n{r.logs()}")
    wait_for(lambda: r.strategy(f"{r.name}-live") == "MostAllocated", 30, what="profile status")
    plane.kubectl("delete", "node", f"{r.namespace}-n1", "--wait=false")


def test_upgrade_with_changed_values_takes_effect(release: Release) -> None:
    plane, r = release.plane, release
    r.install(r.values())
    r.start_replica()
    wait_for(lambda: r.strategy(f"{r.name}-live") == "MostAllocated", 90, what=f"profile Ready:\n{r.logs()}")
    before = get_json(plane, "deployment", r.fullname, "-n", r.namespace)
    checksum = before["spec"]["template"]["metadata"]["annotations"]["kopfscheduler.io/config-checksum"]

    values = r.values(profile_strategy="RequestedToCapacityRatio", replicas=1)
    values["config"]["profiles"][0]["schedulerName"] = f"{r.name}-file2"
    values["podDisruptionBudget"] = {"enabled": False}
    values["schedulerProfiles"][0]["spec"]["pluginConfig"][0]["args"]["scoringStrategy"][
        "requestedToCapacityRatio"
    ] = {"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}
    r.upgrade(values)
    after = get_json(plane, "deployment", r.fullname, "-n", r.namespace)
    assert after["spec"]["replicas"] == 1
    assert (
        after["spec"]["template"]["metadata"]["annotations"]["kopfscheduler.io/config-checksum"] != checksum
    )
    config = get_json(plane, "configmap", f"{r.fullname}-config", "-n", r.namespace)
    assert f"{r.name}-file2" in config["data"]["config.yaml"]
    assert not plane.kubectl("get", "pdb", "-n", r.namespace, "--ignore-not-found", "-o", "name").strip()
    # The SchedulerProfile changed under the running scheduler: it takes the new strategy live.
    wait_for(
        lambda: r.strategy(f"{r.name}-live") == "RequestedToCapacityRatio",
        60,
        what=f"live change:\n{r.logs()}",
    )
    assert json.loads(r.helm_run("status", r.name, "-n", r.namespace, "-o", "json"))["version"] == 2


def test_uninstall_leaves_no_chart_object_and_keeps_the_crds(release: Release) -> None:
    plane, r = release.plane, release
    r.install(r.values())
    objs = r.manifest()
    assert len(objs) == 10
    r.helm_run("uninstall", r.name, "--namespace", r.namespace, "--wait")
    left = [key(o) for o in objs if r.exists(o)]
    assert not left
    assert not plane.kubectl("get", "secrets", "-n", r.namespace, "-o", "name").strip()  # no release record
    for crd in ("schedulerprofiles.kopfscheduler.io", "clusterkopfpeerings.kopf.dev"):
        assert get_json(plane, "crd", crd)["metadata"]["name"] == crd


def test_one_version_for_the_package_the_chart_and_the_image() -> None:
    from kopf_scheduler import __version__

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    kustomization = yaml.safe_load((ROOT / "kustomization.yaml").read_text())
    assert kustomization["images"][0]["newTag"] == __version__
    deployment = yaml.safe_load((ROOT / "manifests" / "20-deployment.yaml").read_text())
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"kopf-scheduler:{__version__}"
