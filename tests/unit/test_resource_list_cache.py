"""parse_resource_list's cache of parsed ResourceLists (issue 30: a node's allocatable is ~60 % of
parsing it, and the nodes of a cluster share a few lists): every caller gets its own Resource, and
what the uncached parse refuses is refused every time."""

from __future__ import annotations

import pytest

from kopf_scheduler.api.objects import parse_node
from kopf_scheduler.api.resources import parse_resource_list
from kopf_scheduler.api.types import ObjectError


def _node(name: str, allocatable: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"name": name}, "status": {"allocatable": allocatable}}


def test_nodes_with_one_allocatable_get_equal_but_separate_resources() -> None:
    allocatable = {"cpu": "4", "memory": "32Gi", "pods": "110", "example.com/gpu": "2"}
    first, second = parse_node(_node("a", allocatable)), parse_node(_node("b", dict(allocatable)))
    assert first.allocatable == second.allocatable
    assert (first.allocatable.milli_cpu, first.allocatable.memory) == (4000, 32 * 2**30)
    assert first.allocatable.scalar == {"example.com/gpu": 2}
    first.allocatable.milli_cpu = 1  # a Resource is mutable: nobody else's may change with it
    first.allocatable.scalar["example.com/gpu"] = 7
    third = parse_node(_node("c", allocatable))
    for other in (second, third):
        assert other.allocatable.milli_cpu == 4000
        assert other.allocatable.scalar == {"example.com/gpu": 2}


@pytest.mark.parametrize("bad", [{"cpu": "-1"}, {"cpu": "lots"}, {"cpu": True}, {"cpu": ["1"]}])
def test_what_the_parse_refuses_is_refused_every_time(bad: dict[str, object]) -> None:
    parse_resource_list({"cpu": "1"}, "status.allocatable")  # a cached list of the same name
    for _ in range(2):
        with pytest.raises(ObjectError, match=r"status\.allocatable\.cpu"):
            parse_resource_list(bad, "status.allocatable")


def test_a_bool_is_refused_after_the_number_it_equals_was_parsed() -> None:
    """True == 1.0 and hash(True) == hash(1.0): the quantity cache must not answer True with 1.0's
    value (a full unit run parsed a 1.0 before test_what_the_parse_refuses... and True slipped through)."""
    parse_resource_list({"cpu": 1.0}, "status.allocatable")
    with pytest.raises(ObjectError, match=r"status\.allocatable\.cpu"):
        parse_resource_list({"cpu": True}, "status.allocatable")
