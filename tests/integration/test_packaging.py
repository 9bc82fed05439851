"""The wheel and the sdist as released, installed alone in a fresh venv, and the kubectl plugin.

``python -m build`` makes both from this checkout, ``twine check --strict`` passes them, and the
wheel goes into a new venv (its dependencies from the index, nothing of the checkout: no
``--system-site-packages``, commands run outside the checkout). There ``run`` binds a pod,
``simulate`` answers every example as the checkout does, ``explain`` answers as the checkout does,
and the workbench commands say in one line that they need a checkout. kubectl's own plugin
discovery (kubectl of the local control plane, the venv's bin on ``PATH``) runs
``kubectl-kopf_scheduler`` for ``kubectl kopf-scheduler``, with the same answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kopf_scheduler import __version__
from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_operator_helpers import ROOT, create, free_port, node, node_of, pod, wait_for

pytestmark = pytest.mark.integration

EXAMPLES = sorted((ROOT / "tests" / "examples").glob("*.yaml"))


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=ROOT)
    assert built.returncode == 0, built.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel and its dependencies only; returns its bin directory."""
    root = tmp_path_factory.mktemp("venv")
    made = _run([sys.executable, "-m", "venv", str(root)], cwd=root)
    assert made.returncode == 0, made.stderr
    wheel = next(dist.glob("*.whl"))
    installed = _run(
        [
            str(root / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(wheel),
        ],
        cwd=root,
    )
    assert installed.returncode == 0, installed.stderr[-4000:]
    return root / "bin"


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[Path]:
    """A working directory away from the checkout, and an environment that does not point into it."""
    assert ROOT not in tmp_path.parents
    yield tmp_path


def _env(bin_dir: Path | None = None, **extra: str) -> dict[str, str]:
    drop = {"PYTHONPATH", "KUBECONFIG", "VIRTUAL_ENV", "KOPF_SCHEDULER_CONTROLPLANE_SRC"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    if bin_dir is not None:  # the venv first; nothing else that holds a kopf-scheduler
        env["PATH"] = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
    env.update(extra)
    return env


def test_wheel_and_sdist_pass_twine_check(dist: Path) -> None:
    wheel, sdist = next(dist.glob("*.whl")), next(dist.glob("*.tar.gz"))
    assert wheel.name == f"kopf_scheduler-{__version__}-py3-none-any.whl"
    assert sdist.name == f"kopf_scheduler-{__version__}.tar.gz"
    out = _run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)], cwd=dist)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("PASSED") == 2, out.stdout
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        entry_points = zf.read(f"kopf_scheduler-{__version__}.dist-info/entry_points.txt").decode()
    assert "kopf_scheduler/py.typed" in names
    assert not [n for n in names if n.startswith("kopf_scheduler_workbench")]  # the workbench stays out
    assert "kubectl-kopf_scheduler = kopf_scheduler.cli:kubectl_plugin" in entry_points
    with tarfile.open(sdist) as tf:
        assert f"kopf_scheduler-{__version__}/pyproject.toml" in tf.getnames()


def test_wheel_alone_has_its_version_and_no_checkout(venv: Path, outside: Path) -> None:
    python = str(venv / "python")
    where = _run([python, "-c", "import kopf_scheduler; print(kopf_scheduler.__file__)"], outside, _env(venv))
    assert where.returncode == 0 and Path(where.stdout.strip()).is_relative_to(venv.parent), where
    out = _run([str(venv / "kopf-scheduler"), "--version"], outside, _env(venv))
    assert out.returncode == 0 and out.stdout.strip() == f"kopf-scheduler {__version__}", out


@pytest.mark.parametrize("command", ["bench", "fidelity", "controlplane", "playground"])
def test_workbench_commands_say_in_one_line_they_need_a_checkout(
    venv: Path, outside: Path, command: str
) -> None:
    out = _run([str(venv / "kopf-scheduler"), command], outside, _env(venv))
    assert out.returncode == 1 and out.stdout == "", out
    assert out.stderr.splitlines() == [
        f"kopf-scheduler {command}: works from a git checkout of kopf-scheduler only (pip install -e . "
        "there); this installation has run, simulate, explain and config"
    ]


def test_simulate_from_the_wheel_answers_every_example_as_the_checkout(venv: Path, outside: Path) -> None:
    assert len(EXAMPLES) >= 10
    for example in EXAMPLES:
        args = ["simulate", "-o", "json", "--seed", "7", str(example)]
        ours = _run([str(venv / "kopf-scheduler"), *args], outside, _env(venv))
        checkout = _run([sys.executable, "-m", "kopf_scheduler", *args], ROOT, _env())
        assert (ours.returncode, ours.stdout, ours.stderr) == (
            checkout.returncode,
            checkout.stdout,
            checkout.stderr,
        ), example.name
        if ours.returncode == 0:
            assert json.loads(ours.stdout), example.name


def _scenario(plane: ControlPlane) -> tuple[str, dict[str, str]]:
    """A namespace with a 2-cpu and a 1-cpu node of its own and a pending 1500m pod: one node fits."""
    ns = f"wheel-{uuid.uuid4().hex[:6]}"
    plane.kubectl("create", "namespace", ns)
    label = {"wheel-test": ns}
    create(plane, node(f"{ns}-big", cpu="2", labels=label), node(f"{ns}-small", cpu="1", labels=label))
    create(plane, pod("p", ns, cpu="1500m", node_selector=label))
    return ns, label


def test_explain_and_run_from_the_wheel(control_plane: ControlPlane, venv: Path, outside: Path) -> None:
    plane = control_plane
    ns, _ = _scenario(plane)
    kubeconfig = str(plane.kubeconfig)
    args = ["explain", f"{ns}/p", "--kubeconfig", kubeconfig]
    ours = _run([str(venv / "kopf-scheduler"), *args], outside, _env(venv))
    checkout = _run([sys.executable, "-m", "kopf_scheduler", *args], ROOT, _env())
    assert ours.returncode == 0, ours.stderr
    assert (ours.stdout, ours.stderr) == (checkout.stdout, checkout.stderr)
    assert f"{ns}-big" in ours.stdout and "Insufficient cpu" in ours.stdout, ours.stdout

    port = free_port()
    log = outside / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(venv / "kopf-scheduler"), "run", "--kubeconfig", kubeconfig, "--standalone",
                "--namespace", ns, "--metrics-host", "127.0.0.1", "--metrics-port", str(port),
            ],
            stdout=out, stderr=subprocess.STDOUT, cwd=outside, env=_env(venv, POD_ID=f"wheel-{ns}"),
        )  # fmt: skip
    try:
        bound = wait_for(
            lambda: node_of(plane, ns, "p"), 90, what=f"p bound by the wheel's run:\n{log.read_text()}"
        )
        assert bound == f"{ns}-big"
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, log.read_text()[-4000:]
    assert "Traceback" not in log.read_text()


def test_kubectl_plugin_through_kubectls_discovery(
    control_plane: ControlPlane, venv: Path, outside: Path
) -> None:
    """kubectl (the control plane's, argv[0] kubectl) finds kubectl-kopf_scheduler on PATH and runs it
    with ``$KUBECONFIG``: ``explain`` and ``simulate --from-cluster`` give what kopf-scheduler gives."""
    plane = control_plane
    ns, label = _scenario(plane)
    env = _env(venv, KUBECONFIG=str(plane.kubeconfig))
    kubectl = [str(plane.bin_path), "kubectl"]
    listed = _run([*kubectl, "plugin", "list", "--name-only"], outside, env)
    assert "kubectl-kopf_scheduler" in listed.stdout.split(), listed.stdout + listed.stderr

    extra = outside / "extra.yaml"
    extra_pod = pod("extra", ns, cpu="500m", node_selector=label)
    extra.write_text(json.dumps(extra_pod))
    for args in (
        ["explain", f"{ns}/p"],
        ["explain", f"{ns}/p", "-o", "json", "--node", f"{ns}-small"],
        ["simulate", "--from-cluster", "--seed", "3", "-o", "json", str(extra)],
    ):
        through_kubectl = _run([*kubectl, "kopf-scheduler", *args], outside, env)
        direct = _run([str(venv / "kopf-scheduler"), *args], outside, env)
        assert through_kubectl.returncode == 0, through_kubectl.stderr
        assert (through_kubectl.stdout, through_kubectl.stderr) == (direct.stdout, direct.stderr), args
        assert ns in through_kubectl.stdout
    usage = _run([*kubectl, "kopf-scheduler", "--help"], outside, env)
    assert usage.stdout.startswith("usage: kubectl kopf-scheduler"), usage.stdout


def test_krew_manifest_names_the_archive_it_would_install(tmp_path: Path) -> None:
    import yaml

    manifest = yaml.safe_load((ROOT / "plugins" / "kopf-scheduler.yaml").read_text())
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "kopf-scheduler"
    assert manifest["spec"]["version"] == f"v{__version__}"
    (platform,) = manifest["spec"]["platforms"]
    out = _run([str(ROOT / "scripts" / "krew-archive"), str(tmp_path)], ROOT)
    assert out.returncode == 0, out.stderr
    archive, sha256 = out.stdout.split()
    assert platform["sha256"] == sha256, (
        "plugins/kopf-scheduler.yaml: sha256 of scripts/krew-archive's output"
    )
    assert Path(platform["uri"]).name == Path(archive).name
    with tarfile.open(archive) as tf:
        member = tf.getmember(platform["bin"])
        assert member.isfile() and member.mode & 0o111


def test_krew_launcher_through_kubectls_discovery(
    control_plane: ControlPlane, venv: Path, outside: Path
) -> None:
    """The archive krew would unpack, found by kubectl: it runs the installed package's command, or
    says in one line what to install."""
    plane = control_plane
    ns, _ = _scenario(plane)
    out = _run([str(ROOT / "scripts" / "krew-archive"), str(outside)], ROOT)
    archive = out.stdout.split()[0]
    krew_bin = outside / "krew-bin"
    with tarfile.open(archive) as tf:
        tf.extractall(krew_bin, filter="data")
    kubectl = [str(plane.bin_path), "kubectl"]
    env = _env(venv, KUBECONFIG=str(plane.kubeconfig))
    env["PATH"] = f"{krew_bin}:{env['PATH']}"  # krew's first, then the venv's kopf-scheduler
    listed = _run([*kubectl, "plugin", "list"], outside, env)
    found = [line for line in listed.stdout.splitlines() if line.endswith("/kubectl-kopf_scheduler")]
    assert found[0] == str(krew_bin / "kubectl-kopf_scheduler"), listed.stdout  # kubectl runs the first
    through_krew = _run([*kubectl, "kopf-scheduler", "explain", f"{ns}/p"], outside, env)
    direct = _run([str(venv / "kopf-scheduler"), "explain", f"{ns}/p"], outside, env)
    assert through_krew.returncode == 0, through_krew.stderr
    assert (through_krew.stdout, through_krew.stderr) == (direct.stdout, direct.stderr)

    env["PATH"] = f"{krew_bin}:/usr/bin:/bin"  # the package not installed
    missing = _run([*kubectl, "kopf-scheduler", "explain", f"{ns}/p"], outside, env)
    assert missing.returncode == 1 and missing.stderr.splitlines() == [
        "kubectl kopf-scheduler: needs the kopf-scheduler Python package: pip install kopf-scheduler "
        "(Python >= 3.11)"
    ], missing.stderr
