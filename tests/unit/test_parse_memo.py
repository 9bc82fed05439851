"""parse_pod memoises containers/tolerations/affinity by the raw sub-structure: same result as plain."""

from __future__ import annotations

import copy
import dataclasses
import gc
from typing import Any

import pytest

from kopf_scheduler.api import objects
from kopf_scheduler.api.objects import Pod, parse_pod
from kopf_scheduler.api.types import ObjectError
from kopf_scheduler.cluster.informer import _gc_paused, _trim
from kopf_scheduler_workbench.testing.builders import pod_dict


def _fields(pod: Pod) -> dict[str, Any]:
    return {f.name: getattr(pod, f.name) for f in dataclasses.fields(pod)}


def _rich(name: str) -> dict[str, Any]:
    raw = pod_dict(name, cpu="250m", uid=f"uid-{name}", labels={"app": "web"})
    spec = raw["spec"]
    spec["containers"][0]["resources"]["limits"] = {"memory": "1Gi", "example.com/gpu": "1"}
    spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    spec["initContainers"] = [
        {
            "name": "side",
            "image": "side:1",
            "restartPolicy": "Always",
            "resources": {"requests": {"cpu": "1"}},
        },
        {"name": "init", "image": "init:1", "resources": {"requests": {"cpu": "2", "memory": "1Mi"}}},
    ]
    spec["overhead"] = {"cpu": "10m"}
    spec["tolerations"] = [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]
    spec["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    spec["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
    ]
    raw["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    return raw


def test_memoised_parse_equals_plain_parse() -> None:
    for i in range(3):  # the first parse fills the memo, the others hit it
        raw = _rich(f"p{i}")
        assert _fields(parse_pod(raw)) == _fields(objects._parse_pod(raw, memo=False))


def test_memo_hands_each_pod_its_own_requests() -> None:
    a, b = parse_pod(_rich("a")), parse_pod(_rich("b"))
    assert a.requests == b.requests and a.requests is not b.requests
    a.requests.milli_cpu += 1
    assert parse_pod(_rich("c")).requests == b.requests


@pytest.mark.parametrize("odd", [1, 1.0, True, "1", None])
def test_memo_keys_distinguish_equal_comparing_types(odd: Any) -> None:
    """``1 == 1.0 == True`` in Python: a memo keyed loosely would accept True after 1 (or an
    explicit null after a value)."""
    good = _rich("good")
    parse_pod(good)
    for value in (odd, 1, 1.0, True, "1", None):
        raw = copy.deepcopy(good)
        raw["spec"]["containers"][0]["resources"]["requests"]["cpu"] = value
        raw["spec"]["tolerations"][0]["tolerationSeconds"] = value
        try:
            plain: dict[str, Any] | str = _fields(objects._parse_pod(raw, memo=False))
        except ObjectError as exc:
            plain = exc.path
        try:
            memo: dict[str, Any] | str = _fields(parse_pod(raw))
        except ObjectError as exc:
            memo = exc.path
        assert memo == plain, value


def test_malformed_pod_after_memo_hit_names_the_first_field() -> None:
    raw = _rich("bad")
    parse_pod(raw)
    raw["metadata"]["labels"]["n"] = 1  # labels come after requests, before tolerations
    raw["spec"]["tolerations"][0]["operator"] = "Maybe"
    with pytest.raises(ObjectError) as info:
        parse_pod(raw)
    assert info.value.path == "metadata.labels.n"


def test_unkeyable_shapes_take_the_plain_path() -> None:
    raw = _rich("tuple")
    raw["spec"]["tolerations"] = tuple(raw["spec"]["tolerations"])
    assert parse_pod(raw).tolerations == parse_pod(_rich("list")).tolerations


def test_trim_drops_managed_fields_only() -> None:
    raw = _rich("trim")
    raw["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    _trim(raw)
    assert "managedFields" not in raw["metadata"] and raw["metadata"]["name"] == "trim"


def test_gc_pause_nests_across_overlapping_listings() -> None:
    assert gc.isenabled()
    first = _gc_paused()
    second = _gc_paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first listing ends while the second goes on
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()
