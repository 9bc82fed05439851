"""PrioritySort: higher priority first, then earlier timestamp."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.plugins.priority_sort import PrioritySort
from kopf_scheduler_workbench.testing.builders import make_pod


@dataclass
class Queued:
    pod: Pod
    timestamp: float


@pytest.mark.parametrize(
    ("p1", "t1", "p2", "t2", "expected"),
    [
        (100, 2.0, 10, 1.0, True),  # higher priority wins even when later
        (10, 1.0, 100, 2.0, False),
        (10, 1.0, 10, 2.0, True),  # same priority: earlier first
        (10, 2.0, 10, 1.0, False),
        (10, 1.0, 10, 1.0, False),  # strict
        (-5, 1.0, 0, 2.0, False),
    ],
)
def test_less(p1: int, t1: float, p2: int, t2: float, expected: bool) -> None:
    a = Queued(make_pod("a", priority=p1), t1)
    b = Queued(make_pod("b", priority=p2), t2)
    assert PrioritySort().less(a, b) is expected


def test_pod_without_priority_is_zero() -> None:
    a = Queued(make_pod("a"), 5.0)
    b = Queued(make_pod("b", priority=1), 1.0)
    assert PrioritySort().less(b, a)
    assert not PrioritySort().less(a, b)
