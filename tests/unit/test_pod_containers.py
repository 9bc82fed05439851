"""A pod's containers, host namespaces and conditions, parsed once by parse_pod (issue 29).

The engine reads these typed fields instead of ``pod.raw``: each field as written, the memoised
parse equal to the plain one, and the memo telling apart pods that differ only in what the views
carry (a memo keyed on too little would hand one pod another's containers).
"""

from __future__ import annotations

import copy
import dataclasses
from fractions import Fraction
from typing import Any

import pytest

from kopf_scheduler.api import objects
from kopf_scheduler.api.containers import Container, PodCondition
from kopf_scheduler.api.objects import Pod, parse_pod
from kopf_scheduler.api.types import ObjectError
from kopf_scheduler_workbench.testing.builders import pod_dict


def _fields(pod: Pod) -> dict[str, Any]:
    return {f.name: getattr(pod, f.name) for f in dataclasses.fields(pod) if f.name != "raw"}


def _pod(name: str = "p") -> dict[str, Any]:
    raw = pod_dict(
        name,
        containers=[
            {
                "name": "main",
                "image": "app:1",
                "resources": {
                    "requests": {"cpu": "250m", "example.com/gpu": "2"},
                    "limits": {"memory": "1Gi", "example.com/gpu": "2"},
                },
                "restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "In"}}],
            },
            {"name": "bare"},
        ],
        initContainers=[
            {"name": "side", "image": "side:1", "restartPolicy": "Always"},
            {
                "name": "init",
                "image": "init:1",
                "volumeMounts": [{"name": "v", "mountPath": "/v", "bindMountOptions": {"x": 1}}],
            },
        ],
        hostNetwork=True,
        hostUsers=False,
    )
    raw["status"] = {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "True"},
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": "preempted",
                "lastTransitionTime": "2026-01-01T00:00:01Z",
            },
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ],
    }
    return raw


def test_containers_parse_into_typed_views() -> None:
    pod = parse_pod(_pod())
    main, bare = pod.containers
    assert main == Container(
        name="main",
        image="app:1",
        requests={"cpu": Fraction(1, 4), "example.com/gpu": Fraction(2)},
        limits={"memory": Fraction(2**30), "example.com/gpu": Fraction(2)},
        restart_all_containers=True,
    )
    assert bare == Container(name="bare")
    side, init = pod.init_containers
    assert side.sidecar and not init.sidecar
    assert init.bind_mount_options and not side.bind_mount_options and not main.bind_mount_options
    assert pod.images == ("side:1", "init:1", "app:1")  # init containers first, unset images left out
    assert pod.host_network and pod.host_users is False
    assert pod.ephemeral_containers == ()


def test_host_namespaces_unset() -> None:
    pod = parse_pod(pod_dict("plain"))
    assert not pod.host_network and pod.host_users is None


def test_ephemeral_containers() -> None:
    raw = pod_dict("debugged")
    raw["spec"]["ephemeralContainers"] = [
        {"name": "dbg", "image": "busybox", "volumeMounts": [{"name": "v", "bindMountOptions": {"y": 1}}]}
    ]
    (dbg,) = parse_pod(raw).ephemeral_containers
    assert dbg.name == "dbg" and dbg.bind_mount_options


def test_conditions_the_scheduler_reads() -> None:
    raw = _pod()
    # Ready is not one the scheduler reads, nor PodScheduled once True (bound): left out.
    assert parse_pod(raw).conditions == (
        PodCondition(
            "DisruptionTarget", "True", "PreemptionByScheduler", "preempted", "2026-01-01T00:00:01Z"
        ),
    )
    raw["status"]["conditions"][2] = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    pod = parse_pod(raw)
    assert pod.condition("PodScheduled") == PodCondition(
        "PodScheduled", "False", "Unschedulable", "0/3 nodes are available", "2026-01-01T00:00:00Z"
    )
    assert pod.condition("PodScheduled") is pod.conditions[1]
    assert pod.condition("Ready") is None


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda r: r["status"]["conditions"].insert(1, "Ready"), "status.conditions[1]"),
        (lambda r: r["status"].update(conditions={"type": "Ready"}), "status.conditions"),
        (
            lambda r: r["spec"]["containers"][0]["resources"]["limits"].update(cpu="lots"),
            "spec.containers[0].resources.limits.cpu",
        ),
        (lambda r: r["spec"].update(ephemeralContainers=["dbg"]), "spec.ephemeralContainers[0]"),
    ],
)
def test_malformed_fields_are_named(edit: Any, path: str) -> None:
    raw = _pod()
    edit(raw)
    with pytest.raises(ObjectError) as info:
        parse_pod(raw)
    assert info.value.path == path


def test_memoised_parse_equals_plain_parse() -> None:
    for i in range(3):
        raw = _pod(f"p{i}")
        assert _fields(parse_pod(raw)) == _fields(objects._parse_pod(raw, memo=False))


@pytest.mark.parametrize(
    "edit",
    [
        lambda c: c.update(name="renamed"),
        lambda c: c.pop("restartPolicyRules"),
        lambda c: c["restartPolicyRules"][0].update(action="Restart"),
        lambda c: c.update(volumeMounts=[{"name": "v", "mountPath": "/v", "bindMountOptions": {"z": 1}}]),
        lambda c: c.update(ports=[{"containerPort": 80, "hostPort": 8080}]),
    ],
)
def test_memo_tells_apart_what_the_views_carry(edit: Any) -> None:
    """A pod differing from a memoised one only in a container's name, restart rules, mount
    options or host ports gets its own containers, as the plain parse gives."""
    first = _pod("first")
    parse_pod(first)
    other = copy.deepcopy(first)
    edit(other["spec"]["containers"][0])
    got = parse_pod(other)
    assert _fields(got) == _fields(objects._parse_pod(other, memo=False))
    assert (got.containers, got.host_ports) != (parse_pod(first).containers, parse_pod(first).host_ports)


def test_memo_ignores_ports_without_host_port_but_keeps_their_errors() -> None:
    raw = _pod("ports")
    raw["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]
    parse_pod(raw)
    again = copy.deepcopy(raw)
    again["spec"]["containers"][0]["ports"] = [{"containerPort": 81, "name": "http"}]
    assert parse_pod(again).host_ports == ()
    bad = copy.deepcopy(raw)
    bad["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": False}]
    with pytest.raises(ObjectError) as info:  # as the plain parse does, memo or not
        parse_pod(bad)
    assert info.value.path == "spec.containers[0].ports[0].hostPort"


def test_containers_are_shared_by_the_pods_of_a_template() -> None:
    a, b = parse_pod(_pod("a")), parse_pod(_pod("b"))
    assert a.containers is b.containers and a.init_containers is b.init_containers
