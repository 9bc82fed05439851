"""Helpers (no tests) for the chart's tests: the pinned helm (scripts/helm), running and rendering."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import yaml

from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_operator_helpers import ROOT

CHART = ROOT / "charts" / "kopf-scheduler"
CONFIG_PATH = "/etc/kopf-scheduler/config.yaml"  # where the chart mounts values' config


def build_helm() -> Path:
    """The pinned helm, built on first use (minutes) and reused from the cache after."""
    out = subprocess.run(
        [str(ROOT / "scripts" / "helm"), "build"], capture_output=True, text=True, timeout=1800, check=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


def run_helm(helm: Path, *args: str, plane: ControlPlane | None = None) -> str:
    """helm's stdout; an AssertionError with its stderr when it fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    if plane is not None:
        env["KUBECONFIG"] = str(plane.kubeconfig)
    # Helm's own state (repositories, cache) under the test's control plane, never the user's.
    home = (plane.workdir if plane is not None else Path(os.environ.get("TMPDIR", "/tmp"))) / "helm-home"
    env.update(HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"))
    env["HELM_DATA_HOME"] = str(home / "data")
    out = subprocess.run([str(helm), *args], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, f"helm {' '.join(args)}: {out.stderr}"
    return out.stdout


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def render(helm: Path, *args: str, release: str = "kopf-scheduler", namespace: str = "kopf-scheduler") -> str:
    """``helm template`` of the chart; a release named kopf-scheduler renders manifests/' names."""
    return run_helm(helm, "template", release, str(CHART), "--namespace", namespace, *args)


def values_file(tmp_path: Path, values: dict[str, Any]) -> str:
    """``values`` as a file for ``-f``."""
    path = tmp_path / f"values-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)
