"""A pod's requests in each form the reference computes them (component-helpers ``PodRequests``
under the scheduler's options): status-aware for node accounting (in-place resize), spec with
pod-level resources for NodeResourcesFit's Filter, container level with defaults for its Score.

Cases follow component-helpers' helpers_test.go (TestPodResourceRequests, TestPodLevelResourceRequests)
and the scheduler's getNonMissingContainerRequests.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kopf_scheduler.api import objects
from kopf_scheduler.api.objects import parse_pod
from kopf_scheduler.api.types import ObjectError
from kopf_scheduler_workbench.testing.builders import pod_dict

MI = 2**20
GI = 2**30
HUGE = "hugepages-2Mi"


def ctr(name: str, requests: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "img", **extra}
    if requests is not None:
        c["resources"] = {"requests": requests}
    return c


def raw_pod(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
    *,
    pod_level: dict[str, str] | None = None,
    overhead: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    raw = pod_dict("p", containers=containers)
    if init:
        raw["spec"]["initContainers"] = init
    if pod_level is not None:
        raw["spec"]["resources"] = {"requests": pod_level}
    if overhead is not None:
        raw["spec"]["overhead"] = overhead
    if status is not None:
        raw["status"] = status
    return raw


def parse_both(raw: dict[str, Any]) -> Any:
    """Parse with and without the memo: both must agree (the memo keys on the status too)."""
    memo = parse_pod(copy.deepcopy(raw))
    plain = objects._parse_pod(copy.deepcopy(raw), memo=False)
    for attr in ("requests", "non_zero_cpu", "non_zero_memory", "spec_requests", "container_requests"):
        assert getattr(memo, attr) == getattr(plain, attr), attr
    return memo


def cs(
    name: str, allocated: dict[str, str] | None = None, actual: dict[str, str] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "ready": True, "restartCount": 0}
    if allocated is not None:
        out["allocatedResources"] = allocated
    if actual is not None:
        out["resources"] = {"requests": actual}
    return out


INFEASIBLE = {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}
DEFERRED = {"type": "PodResizePending", "status": "True", "reason": "Deferred"}


# (name, raw pod, node-accounting cpu/memory/ephemeral in milli/bytes, filter cpu (spec))
STATUS_CASES = [
    (
        "larger init container",
        raw_pod([ctr("c", {"cpu": "1"})], [ctr("i", {"cpu": "4"})]),
        (4000, 0, 0),
        4000,
    ),
    (
        "larger containers",
        raw_pod([ctr("a", {"cpu": "2"}), ctr("b", {"cpu": "3"})], [ctr("i", {"cpu": "2"})]),
        (5000, 0, 0),
        5000,
    ),
    (
        "pod overhead included",
        raw_pod(
            [ctr("a", {"cpu": "2"}), ctr("b", {"cpu": "3"})],
            [ctr("i", {"cpu": "2"}, resources={"requests": {"cpu": "2"}, "limits": {"cpu": "2"}})],
            overhead={"cpu": "1", "memory": "1Gi"},
        ),
        (6000, GI, 0),
        6000,
    ),
    (
        "resized, infeasible: the actuated resources count, not the spec",
        raw_pod(
            [ctr("container-1", {"cpu": "4"})],
            status={
                "conditions": [INFEASIBLE],
                "containerStatuses": [cs("container-1", actual={"cpu": "2"})],
            },
        ),
        (2000, 0, 0),
        4000,
    ),
    (
        "resized, infeasible and in progress: max of allocated and actuated",
        raw_pod(
            [ctr("container-1", {"cpu": "6"})],
            status={
                "conditions": [INFEASIBLE],
                "containerStatuses": [cs("container-1", allocated={"cpu": "4"}, actual={"cpu": "2"})],
            },
        ),
        (4000, 0, 0),
        6000,
    ),
    (
        "resized, no resize status: the spec is the max",
        raw_pod(
            [ctr("container-1", {"cpu": "4"})],
            status={"containerStatuses": [cs("container-1", actual={"cpu": "2"})]},
        ),
        (4000, 0, 0),
        4000,
    ),
    (
        "resized: per-resource 3-way maximum",
        raw_pod(
            [ctr("container-1", {"cpu": "30m", "memory": "20M", "ephemeral-storage": "10G"})],
            status={
                "containerStatuses": [
                    cs(
                        "container-1",
                        allocated={"cpu": "20m", "memory": "10M", "ephemeral-storage": "30G"},
                        actual={"cpu": "10m", "memory": "30M", "ephemeral-storage": "20G"},
                    )
                ]
            },
        ),
        (30, 30 * 10**6, 30 * 10**9),
        30,
    ),
    (
        "scale-up in progress counts the larger allocation (the node is not overcommitted)",
        raw_pod(
            [ctr("c", {"cpu": "1", "memory": "1Gi"})],
            status={
                "conditions": [DEFERRED],
                "containerStatuses": [cs("c", allocated={"cpu": "3", "memory": "1Gi"}, actual={"cpu": "1"})],
            },
        ),
        (3000, GI, 0),
        1000,
    ),
    (
        "init container statuses are matched by name",
        raw_pod(
            [ctr("c", {"cpu": "1"})],
            [ctr("side", {"cpu": "1"}, restartPolicy="Always")],
            status={"initContainerStatuses": [cs("side", allocated={"cpu": "2"})]},
        ),
        (3000, 0, 0),
        2000,
    ),
    (
        "infeasible resize without container statuses: nothing is actuated or allocated",
        raw_pod([ctr("c", {"cpu": "1"})], status={"conditions": [INFEASIBLE]}),
        (0, 0, 0),
        1000,
    ),
]


@pytest.mark.parametrize(("name", "raw", "want", "filter_cpu"), STATUS_CASES)
def test_status_aware_requests(
    name: str, raw: dict[str, Any], want: tuple[int, int, int], filter_cpu: int
) -> None:
    pod = parse_both(raw)
    r = pod.requests
    assert (r.milli_cpu, r.memory, r.ephemeral_storage) == want
    assert pod.filter_requests.milli_cpu == filter_cpu


def test_pod_level_requests_win_for_cpu_memory_and_hugepages() -> None:
    pod = parse_both(
        raw_pod(
            [ctr("c", {"cpu": "1", "memory": "1Gi", HUGE: "4Mi", "ephemeral-storage": "1Gi"})],
            pod_level={"cpu": "2", "memory": "2Gi", HUGE: "10Mi"},
        )
    )
    assert (pod.requests.milli_cpu, pod.requests.memory, pod.requests.scalar[HUGE]) == (2000, 2 * GI, 10 * MI)
    assert pod.requests.ephemeral_storage == GI  # not a pod-level resource: the containers' sum
    assert (pod.non_zero_cpu, pod.non_zero_memory) == (2000, 2 * GI)
    assert pod.filter_requests.scalar[HUGE] == 10 * MI
    # NodeResourcesFit's scorer reads container-level requests only.
    score = pod.score_requests
    assert (score.milli_cpu, score.memory, score.scalar[HUGE]) == (1000, GI, 4 * MI)


def test_pod_level_with_only_unsupported_resources_is_not_set() -> None:
    pod = parse_both(
        raw_pod([ctr("c", {"ephemeral-storage": "1Gi"})], pod_level={"ephemeral-storage": "5Gi"})
    )
    assert pod.requests.ephemeral_storage == GI
    # No pod-level requests: per-container defaults for the missing cpu and memory.
    assert (pod.non_zero_cpu, pod.non_zero_memory) == (100, 200 * MI)


def test_non_zero_defaults_without_pod_level_are_per_container() -> None:
    pod = parse_both(raw_pod([ctr("a", {"cpu": "1"}), ctr("b")]))
    assert (pod.requests.milli_cpu, pod.requests.memory) == (1000, 0)
    assert (pod.non_zero_cpu, pod.non_zero_memory) == (1100, 400 * MI)
    assert (pod.score_requests.milli_cpu, pod.score_requests.memory) == (1100, 400 * MI)


def test_non_zero_defaults_with_pod_level_only_for_resources_nothing_requests() -> None:
    # Pod-level cpu only, no container memory anywhere: memory defaults per container.
    pod = parse_both(raw_pod([ctr("a"), ctr("b")], pod_level={"cpu": "500m"}))
    assert (pod.non_zero_cpu, pod.non_zero_memory) == (500, 400 * MI)
    # One container asks for memory: then no container gets the default.
    pod = parse_both(raw_pod([ctr("a", {"memory": "1Mi"}), ctr("b")], pod_level={"cpu": "500m"}))
    assert (pod.non_zero_cpu, pod.non_zero_memory) == (500, MI)


def test_pod_level_status_resources() -> None:
    raw = raw_pod(
        [ctr("c", {"cpu": "1"})],
        pod_level={"cpu": "1"},
        status={"resources": {"requests": {"cpu": "2"}}, "allocatedResources": {"cpu": "1500m"}},
    )
    pod = parse_both(raw)
    assert pod.requests.milli_cpu == 2000  # max(spec, actuated, allocated) at pod level
    assert pod.filter_requests.milli_cpu == 1000
    raw["status"]["conditions"] = [INFEASIBLE]
    assert parse_both(raw).requests.milli_cpu == 2000  # infeasible: the spec no longer counts


def test_quantities_are_summed_before_rounding() -> None:
    pod = parse_both(raw_pod([ctr("a", {"cpu": "0.4m"}), ctr("b", {"cpu": "0.4m"})]))
    assert pod.requests.milli_cpu == 1  # 0.8m rounds up once, not 1m + 1m


def test_pending_pod_shares_the_plain_forms() -> None:
    pod = parse_both(raw_pod([ctr("c", {"cpu": "1"})]))
    assert pod.spec_requests is None and pod.container_requests is None
    assert pod.filter_requests is pod.requests


def test_malformed_status_resources_name_the_field() -> None:
    raw = raw_pod(
        [ctr("c", {"cpu": "1"})], status={"containerStatuses": [cs("c", allocated={"cpu": "lots"})]}
    )
    with pytest.raises(ObjectError) as err:
        parse_pod(raw)
    assert err.value.path == "status.containerStatuses[c].allocatedResources.cpu"
