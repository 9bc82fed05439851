"""Bad input on the real apiserver, at the layer where each kind of garbage is really stopped.

The apiserver rejects malformed quantities, negative requests and unknown selector operators before
the scheduler ever sees them (asserted here so a change in the apiserver is noticed; the engine's own
handling of those objects is in ``tests/unit/test_bad_input.py``). What it accepts and the scheduler
must handle: absurd but valid requests, resources no node has, huge label sets, pods for a
schedulerName nobody serves, and SchedulerProfile edits that pass the CRD schema but not the
scheduler's validation. Each test also schedules ordinary pods next to the bad ones and ends with
the invariant checker.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler_workbench.clusterstate import fetch_state
from kopf_scheduler_workbench.controlplane import ControlPlane
from kopf_scheduler_workbench.testing.invariants import check

from .test_operator_helpers import (
    Replica,
    create,
    deploy,
    events,
    get_json,
    leading_replica,
    node,
    node_of,
    pod,
    wait_for,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def setup(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, Replica]]:
    sa = deploy(control_plane)
    tag = uuid.uuid4().hex[:6]
    ns = f"bad-{tag}"
    control_plane.kubectl("create", "namespace", ns)
    create(control_plane, *(node(f"bad-{tag}-{i}", cpu="4", labels={"t": tag}) for i in range(2)))
    with leading_replica(sa, f"bad-{tag}", [ns], f"bad-{tag}", tmp_path_factory.mktemp("bad")) as r:
        yield ns, tag, r


def _pod(name: str, ns: str, tag: str, **spec: Any) -> dict[str, Any]:
    raw = pod(name, ns, node_selector={"t": tag})
    raw["spec"].update(spec)
    return raw


def _requests(raw: dict[str, Any], **req: Any) -> dict[str, Any]:
    raw["spec"]["containers"][0]["resources"] = {"requests": req, "limits": {}}
    return raw


def _check_clean(plane: ControlPlane, ns: str) -> None:
    report = check(fetch_state(str(plane.kubeconfig)), namespaces=[ns])
    print(f"\nchecker: {report.summary()}")
    assert report.ok, report.summary()


def _scheduled_false(plane: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    for c in get_json(plane, "pod", name, "-n", ns)["status"].get("conditions") or ():
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return dict(c)
    return None


REJECTED = [
    ("garbage-quantity", lambda r: _requests(r, cpu="lots"), "quantities must match the regular expression"),
    ("negative-request", lambda r: _requests(r, cpu="-1"), "must be greater than or equal to 0"),
    (
        "node-affinity-operator",
        lambda r: {
            **r,
            "spec": {
                **r["spec"],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "z", "operator": "Near", "values": ["a"]}]}
                            ]
                        }
                    }
                },
            },
        },
        "not a valid selector operator",
    ),
    (
        "anti-affinity-operator",
        lambda r: {
            **r,
            "spec": {
                **r["spec"],
                "affinity": {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Like"}]},
                                "topologyKey": "kubernetes.io/hostname",
                            }
                        ]
                    }
                },
            },
        },
        'Invalid value: "Like": not a valid selector operator',
    ),
]


@pytest.mark.parametrize(("case", "mutate", "message"), REJECTED, ids=[c[0] for c in REJECTED])
def test_apiserver_rejects_malformed_pods(
    control_plane: ControlPlane, setup: tuple[str, str, Replica], case: str, mutate: Any, message: str
) -> None:
    """Layer: kube-apiserver validation. The scheduler never sees these; the good pod still binds."""
    ns, tag, replica = setup
    with pytest.raises(subprocess.CalledProcessError) as info:
        control_plane.kubectl("create", "-f", "-", input=json.dumps(mutate(_pod(f"rej-{case}", ns, tag))))
    assert message in info.value.stderr, info.value.stderr
    create(control_plane, _pod(f"ok-{case}", ns, tag))
    wait_for(partial(node_of, control_plane, ns, f"ok-{case}"), 30, what=f"ok-{case} bound")
    assert replica.proc.poll() is None


def test_accepted_oddities_are_reported_and_the_rest_schedules(
    control_plane: ControlPlane, setup: tuple[str, str, Replica]
) -> None:
    """Layer: the scheduler. Absurd requests and unknown resources get FailedScheduling + condition."""
    ns, tag, _ = setup
    many = {f"l{i}.example.com/k": f"v{i}" for i in range(1000)}
    odd = {
        "absurd-cpu": _requests(_pod("absurd-cpu", ns, tag), cpu="1e30"),
        "unknown-resource": _requests(_pod("unknown-resource", ns, tag), **{"example.com/unobtainium": "1"}),
        "no-such-label": _pod("no-such-label", ns, tag, nodeSelector={"t": tag, "nowhere": "x"}),
    }
    odd["unknown-resource"]["spec"]["containers"][0]["resources"]["limits"] = {"example.com/unobtainium": "1"}
    labelled = _pod("many-labels", ns, tag)
    labelled["metadata"]["labels"] = many
    good = [_pod(f"good-{i}", ns, tag) for i in range(10)]
    create(control_plane, *odd.values(), labelled, *good)
    for raw in [labelled, *good]:
        wait_for(
            partial(node_of, control_plane, ns, raw["metadata"]["name"]), 30, what=raw["metadata"]["name"]
        )
    expected = {
        "absurd-cpu": "Insufficient cpu",
        "unknown-resource": "Insufficient example.com/unobtainium",
        "no-such-label": "didn't match Pod's node affinity/selector",
    }
    for name, reason in expected.items():
        cond = wait_for(partial(_scheduled_false, control_plane, ns, name), 30, what=f"{name} condition")
        assert cond["reason"] == "Unschedulable" and reason in cond["message"], cond
        notes = [
            e.get("note", "") for e in events(control_plane, ns, name) if e["reason"] == "FailedScheduling"
        ]
        assert any(reason in n for n in notes), notes
        assert node_of(control_plane, ns, name) == ""
    _check_clean(control_plane, ns)


def test_unknown_scheduler_name_is_left_alone(
    control_plane: ControlPlane, setup: tuple[str, str, Replica]
) -> None:
    """kube-scheduler's rule: no profile serves that name, so another scheduler may; no event or condition."""
    ns, tag, _ = setup
    create(
        control_plane, _pod("stranger", ns, tag, schedulerName="no-such-profile"), _pod("neighbour", ns, tag)
    )
    wait_for(partial(node_of, control_plane, ns, "neighbour"), 30, what="neighbour bound")
    time.sleep(2)
    assert node_of(control_plane, ns, "stranger") == ""
    assert _scheduled_false(control_plane, ns, "stranger") is None
    assert events(control_plane, ns, "stranger") == []


def _profile(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kopfscheduler.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": {"name": name},
        "spec": spec,
    }


def _ready(plane: ControlPlane, name: str) -> dict[str, Any] | None:
    obj = get_json(plane, "schedulerprofile", name)
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"]["generation"]:
        return None
    for c in status.get("conditions") or ():
        if c["type"] == "Ready":
            return {
                **c,
                "activeGeneration": status.get("activeGeneration"),
                "generation": obj["metadata"]["generation"],
            }
    return None


def test_invalid_profile_edits(
    control_plane: ControlPlane, setup: tuple[str, str, Replica], tmp_path: Path
) -> None:
    """Schema violations stop at the apiserver; semantic ones are Ready=False and the last valid stays."""
    ns, tag, _ = setup
    name = f"bad-{tag}"
    sched = f"sched-{tag}"
    apply = partial(control_plane.kubectl, "apply", "-f", "-")
    apply(input=json.dumps(_profile(name, {"schedulerName": sched})))
    first = wait_for(partial(_ready, control_plane, name), 30, what="profile ready")
    assert first["status"] == "True"

    with pytest.raises(subprocess.CalledProcessError) as info:
        apply(input=json.dumps(_profile(name, {"schedulerName": sched, "percentageOfNodesToScore": 300})))
    assert "percentageOfNodesToScore" in info.value.stderr

    bad = {"schedulerName": sched, "plugins": {"score": {"enabled": [{"name": "NoSuchPlugin"}]}}}
    apply(input=json.dumps(_profile(name, bad)))
    invalid = wait_for(
        lambda: (r := _ready(control_plane, name)) and r["status"] == "False" and r, 30, what="InvalidProfile"
    )
    assert invalid["reason"] == "InvalidProfile"
    assert "spec.plugins" in invalid["message"] and "NoSuchPlugin" in invalid["message"], invalid
    assert invalid["activeGeneration"] == first["generation"]

    create(control_plane, _pod("served-by-last-valid", ns, tag, schedulerName=sched))
    wait_for(
        partial(node_of, control_plane, ns, "served-by-last-valid"), 30, what="bound under the last valid"
    )
    control_plane.kubectl("delete", "schedulerprofile", name)
    _check_clean(control_plane, ns)
