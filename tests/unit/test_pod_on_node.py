"""Pod.on_node, the assumed pod of every cycle, is ``dataclasses.replace(pod, node_name=...)``."""

from __future__ import annotations

import dataclasses

from kopf_scheduler.api.objects import Pod
from kopf_scheduler_workbench.testing.builders import make_pod


def test_on_node_equals_replace_field_by_field() -> None:
    pod = make_pod(
        "p",
        cpu="100m",
        memory="128Mi",
        labels={"app": "a"},
        priority=7,
        nodeSelector={"zone": "z1"},
        tolerations=[{"key": "k", "operator": "Exists"}],
    )
    got = pod.on_node("node-1")
    want = dataclasses.replace(pod, node_name="node-1")
    assert got is not pod and got.node_name == "node-1" and pod.node_name == ""
    for f in dataclasses.fields(Pod):
        assert getattr(got, f.name) == getattr(want, f.name), f.name


def test_every_pod_field_is_an_init_argument_and_nothing_runs_after_init() -> None:
    """What on_node relies on: replace() passes the init fields to __init__ and runs __post_init__;
    a field with init=False or a __post_init__ would make the two differ."""
    assert all(f.init for f in dataclasses.fields(Pod))
    assert not hasattr(Pod, "__post_init__")
