"""An out-of-tree plugin that raises for one pod, in a real install (issue 26): ``kopf-scheduler
run`` as the ServiceAccount, the plugin a package found through the ``kopf_scheduler.plugins``
entry point, named by a SchedulerProfile. The pod gets a FailedScheduling event and a PodScheduled
condition naming the plugin and the error, is retried after its backoff, and every other pod
binds: the scheduler goes on."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_operator_helpers import (
    Replica,
    create,
    deploy,
    fresh_namespace,
    get_json,
    leading_replica,
    node,
    node_of,
    pod,
    reason_events,
    wait_for,
)

pytestmark = pytest.mark.integration

PLUGIN = '''
"""An out-of-tree kopf-scheduler plugin with a bug: it raises for pods named "poison-*"."""

from kopf_scheduler.framework.interface import Plugin


class Poison(Plugin):
    name = "Poison"

    def filter(self, state, pod, node_info):
        if pod.name.startswith("poison"):
            raise RuntimeError(f"cannot judge {pod.name}")
        return None


class PoisonPreBind(Plugin):
    name = "PoisonPreBind"

    async def pre_bind(self, state, pod, node_name):
        if pod.name.startswith("poison"):
            raise KeyError(pod.name)
        return None
'''


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An installed distribution as pip leaves one: the module and its dist-info with the entry points."""
    root = tmp_path_factory.mktemp("site")
    (root / "kopf_poison_plugin.py").write_text(PLUGIN)
    info = root / "kopf_poison_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kopf-poison-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            """\
            [kopf_scheduler.plugins]
            Poison = kopf_poison_plugin:Poison
            PoisonPreBind = kopf_poison_plugin:PoisonPreBind
            """
        )
    )
    return root


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane) -> str:
    return fresh_namespace(control_plane, "poison")


@pytest.fixture(scope="module")
def replica(
    control_plane: ControlPlane,
    namespace: str,
    plugin_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Replica]:
    kubeconfig = deploy(control_plane)
    with pytest.MonkeyPatch.context() as mp:  # the replica's environment: the plugin installed
        mp.setenv("PYTHONPATH", str(plugin_path))
        log_dir = tmp_path_factory.mktemp("replica")
        with leading_replica(
            kubeconfig, f"poison-{namespace}", [namespace], f"poison-{namespace}", log_dir
        ) as r:
            mp.undo()
            yield r


def _profile(name: str, plugins: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kopfscheduler.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": {"name": name},
        "spec": {"schedulerName": name, "plugins": plugins},
    }


def _ready(plane: ControlPlane, name: str) -> bool:
    obj = get_json(plane, "schedulerprofile", name)
    conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}
    return conds.get("Ready", {}).get("status") == "True"


def _condition(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    conds = get_json(plane, "pod", name, "-n", namespace)["status"].get("conditions") or ()
    return next((c for c in conds if c["type"] == "PodScheduled"), None)


@pytest.mark.parametrize(
    ("point", "plugins", "message"),
    [
        (
            "filter",
            {"multiPoint": {"enabled": [{"name": "Poison"}]}},
            'running "Poison" filter plugin: RuntimeError: cannot judge {pod}',
        ),
        (
            "prebind",
            {"preBind": {"enabled": [{"name": "PoisonPreBind"}]}},
            "running PreBind plugin \"PoisonPreBind\": KeyError: '{pod}'",
        ),
    ],
)
def test_a_raising_out_of_tree_plugin_fails_its_pod_and_every_other_pod_binds(
    control_plane: ControlPlane,
    replica: Replica,
    namespace: str,
    point: str,
    plugins: dict[str, Any],
    message: str,
) -> None:
    tag = uuid.uuid4().hex[:6]
    scheduler = f"poison-{point}-{tag}"
    create(control_plane, _profile(scheduler, plugins))
    wait_for(
        lambda: _ready(control_plane, scheduler), 30, what=f"profile {scheduler} Ready:\n{replica.logs()}"
    )
    create(control_plane, node(f"poison-{tag}", labels={"t": tag}))
    poison = f"poison-{tag}"
    names = [f"ok{i}-{tag}" for i in range(3)] + [poison] + [f"ok{i}-{tag}" for i in range(3, 6)]
    create(
        control_plane,
        *(pod(n, namespace, scheduler=scheduler, node_selector={"t": tag}) for n in names),
    )
    for name in names:
        if name != poison:
            wait_for(partial(node_of, control_plane, namespace, name), 30, what=f"{name} bound")

    expected = message.format(pod=poison)
    event = wait_for(
        lambda: reason_events(control_plane, namespace, poison, "FailedScheduling"),
        30,
        what=f"FailedScheduling of {poison}:\n{replica.logs()}",
    )[0]
    assert event["note"] == expected
    assert event["type"] == "Warning" and event["reportingController"] == "kopf-scheduler"
    cond = wait_for(lambda: _condition(control_plane, namespace, poison), 15, what="PodScheduled")
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "SchedulerError", expected)

    # Requeued with backoff: the same error again after a second or two (the event's series).
    def attempts() -> int:
        (ev,) = reason_events(control_plane, namespace, poison, "FailedScheduling")
        return int((ev.get("series") or {}).get("count", 1))

    wait_for(lambda: attempts() >= 2, 30, what="a second attempt")
    assert node_of(control_plane, namespace, poison) == ""
    assert replica.proc.poll() is None  # the scheduler is still running, and still scheduling
    late = f"late-{tag}"
    create(control_plane, pod(late, namespace, scheduler=scheduler, node_selector={"t": tag}))
    wait_for(partial(node_of, control_plane, namespace, late), 30, what=f"{late} bound")
