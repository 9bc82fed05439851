"""The import contracts of pyproject.toml: each one breaks on a probe import, and the offline rooms
load neither Kopf nor the workbench when they run.

A contract that no import can break guards nothing; so each is run by ``lint-imports`` on a copy of
the tree with one import added where that contract forbids it, and must be reported BROKEN there
(and KEPT on the tree as it is: scripts/test runs ``lint-imports`` on it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = [c["name"] for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
             ["contracts"]]  # fmt: skip

# (contract name's start, module file under operator/, the import added at its end)
PROBES: list[tuple[str, str, str]] = [
    ("The house:", "kopf_scheduler_workbench/processes.py", "import kopf_scheduler.cli"),
    # The commands sit above the rooms they read: neither the edge nor explain may call back up.
    ("The house:", "kopf_scheduler/cluster/run.py", "import kopf_scheduler.explaintool"),
    ("The product never imports the workbench", "kopf_scheduler/cli.py", "import kopf_scheduler_workbench"),
    ("simulate and explain are offline", "kopf_scheduler/simulate.py", "import kopf"),
    ("simulate and explain are offline", "kopf_scheduler/explain/render.py", "import aiohttp"),
    # The crossing that was a named exception (the live explain's listing) now breaks it.
    (
        "simulate and explain are offline",
        "kopf_scheduler/explain/engine.py",
        "import kopf_scheduler.cluster.listing",
    ),
    (
        "The commands > explain > simulate",
        "kopf_scheduler/simulate.py",
        "import kopf_scheduler.explain.render",
    ),
    (
        "The commands > explain > simulate",
        "kopf_scheduler/explain/render.py",
        "import kopf_scheduler.explaintool",
    ),
    (
        "config is the profile model",
        "kopf_scheduler/config/profile.py",
        "import kopf_scheduler.framework.profiles",
    ),
    (
        "The edge does not import the offline rooms",
        "kopf_scheduler/cluster/run.py",
        "import kopf_scheduler.simulate",
    ),
    # The crossing that was a named exception (the edge writing explain's annotation) now breaks it.
    (
        "The edge does not import the offline rooms",
        "kopf_scheduler/cluster/explain_annotation.py",
        "import kopf_scheduler.explain.render",
    ),
    ("The engine does no Kubernetes I/O", "kopf_scheduler/framework/runtime.py", "import aiohttp"),
    (
        "Plugins see the cluster through the framework's Handle",
        "kopf_scheduler/plugins/node_name.py",
        "import kopf_scheduler.queue",
    ),
    ("Engine layers", "kopf_scheduler/api/objects.py", "import kopf_scheduler.framework.runtime"),
    # The pod group's cycle reaching back for the Scheduler, and the two bottom rooms meeting.
    (
        "Inside the scheduler",
        "kopf_scheduler/scheduler/schedule_one_podgroup.py",
        "import kopf_scheduler.scheduler.schedule_one",
    ),
    ("Inside the scheduler", "kopf_scheduler/scheduler/cycle.py", "import kopf_scheduler.scheduler.profiles"),
    (
        "The test kit does not reach the live cluster",
        "kopf_scheduler_workbench/testing/clock.py",
        "import aiohttp",
    ),
]


def _contract(prefix: str) -> str:
    (name,) = [c for c in CONTRACTS if c.startswith(prefix)]
    return name


def test_every_contract_has_a_probe() -> None:
    assert sorted(CONTRACTS) == sorted({_contract(prefix) for prefix, _, _ in PROBES})


def test_no_contract_names_an_exception() -> None:
    """The crossings once allowed by name (the live explain's listing, the edge's annotation) are gone."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert [c["name"] for c in contracts if c.get("ignore_imports")] == []


def _lint_imports(tree: Path) -> str:
    """lint-imports on ``tree`` (a copy of pyproject.toml and operator/), importing from its operator/."""
    env = {**os.environ, "PYTHONPATH": str(tree / "operator")}
    out = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
         "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return " ".join((out.stdout + out.stderr).split())  # contract names wrap in its report


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("tree")
    shutil.copy(ROOT / "pyproject.toml", tree)
    for package in ("kopf_scheduler", "kopf_scheduler_workbench"):
        shutil.copytree(
            ROOT / "operator" / package,
            tree / "operator" / package,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    return tree


@pytest.mark.parametrize(("prefix", "module", "probe"), PROBES, ids=[f"{p} {m}" for p, m, _ in PROBES])
def test_contract_breaks_on_a_probe_import(tree: Path, prefix: str, module: str, probe: str) -> None:
    name = _contract(prefix)
    path = tree / "operator" / module
    original = path.read_text()
    path.write_text(f"{original}\n{probe}  # probe\n")
    try:
        report = _lint_imports(tree)
    finally:
        path.write_text(original)
    assert f"{name} BROKEN" in report, report[-3000:]
    assert "Contracts: 0 kept" not in report  # the probe breaks what it aims at, not the parsing


def test_offline_rooms_load_neither_kopf_nor_the_workbench() -> None:
    """Imported and run in a fresh interpreter: every explain module, ``simulate`` on an example and
    ``simulate --explain`` on it (the offline explain): no Kopf, aiohttp, edge or workbench gets loaded."""
    code = """
import pkgutil, sys
import kopf_scheduler.explain as explain
import kopf_scheduler.simulate
from kopf_scheduler import cli
for m in pkgutil.iter_modules(explain.__path__):
    __import__(f"kopf_scheduler.explain.{m.name}")
cli.main(["simulate", sys.argv[1]])
cli.main(["simulate", sys.argv[1], "--explain", sys.argv[2]])
bad = sorted(m for m in sys.modules if m in ("kopf", "aiohttp") or m.startswith(
    ("kopf.", "aiohttp.", "kopf_scheduler_workbench", "kopf_scheduler.cluster")))
print("LOADED", bad, file=sys.stderr)
"""
    example = ROOT / "tests" / "examples" / "csi_attach_limits.yaml"
    out = subprocess.run(
        [sys.executable, "-c", code, str(example), _first_pod(example)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert "LOADED []" in out.stderr, out.stderr[-3000:]
    assert "FILTER" in out.stdout or "NODE" in out.stdout, out.stdout[-3000:]  # both answered


def test_the_live_commands_do_load_the_edge() -> None:
    """The check above can fail: the live listing's module, imported the way the commands import it,
    brings the edge's clients in."""
    code = """
import sys
from kopf_scheduler import explaintool
explaintool.live_inputs  # the edge is loaded on use, not by the import
assert "kopf_scheduler.cluster.listing" not in sys.modules
import kopf_scheduler.cluster.listing
edge = ("kopf", "aiohttp", "kopf_scheduler.cluster.apiclient")
print("LOADED", sorted(m for m in edge if m in sys.modules), file=sys.stderr)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    # No Kopf: the credentials are ours; no aiohttp: the client imports it at its first watch.
    assert "LOADED ['kopf_scheduler.cluster.apiclient']" in out.stderr, out.stderr[-3000:]


def _first_pod(example: Path) -> str:
    """``namespace/name`` of the example's first pending Pod (no nodeName), for ``--explain``."""
    import yaml

    for doc in yaml.safe_load_all(example.read_text()):
        if doc and doc.get("kind") == "Pod" and not (doc.get("spec") or {}).get("nodeName"):
            meta = doc["metadata"]
            return f"{meta.get('namespace', 'default')}/{meta['name']}"
    raise AssertionError(f"{example} has no pending Pod")


def test_the_closed_circles_stay_closed_under_type_checking_too() -> None:
    """lint-imports leaves out ``if TYPE_CHECKING:`` imports (pyproject: exclude_type_checking_imports),
    which is where config -> framework hid; grimp with them counted finds no way back either."""
    import grimp

    graph = grimp.build_graph("kopf_scheduler", exclude_type_checking_imports=False, cache_dir=None)
    for importer, imported in (
        ("kopf_scheduler.config", "kopf_scheduler.framework"),
        ("kopf_scheduler.simulate", "kopf_scheduler.explain"),
        # The scheduler's inner rooms: no annotation-only way back up to the Scheduler either.
        ("kopf_scheduler.scheduler.schedule_one_podgroup", "kopf_scheduler.scheduler.schedule_one"),
        ("kopf_scheduler.scheduler.cycle", "kopf_scheduler.scheduler.schedule_one_podgroup"),
    ):
        chain = graph.find_shortest_chain(importer, imported, as_packages=True)
        assert chain is None, f"{importer} reaches {imported}: {' -> '.join(chain or ())}"
