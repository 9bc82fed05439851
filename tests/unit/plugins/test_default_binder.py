"""DefaultBinder: binds through the client and turns API failures into Error statuses."""

from __future__ import annotations

import pytest
from node_plugin_helpers import FakeHandle

from kopf_scheduler.api.objects import PodSpec
from kopf_scheduler.framework.client import ApiError, Conflict, NotFound
from kopf_scheduler.framework.interface import Code, CycleState
from kopf_scheduler.plugins.default_binder import DefaultBinder
from kopf_scheduler.testing.builders import make_pod


class RecordingClient:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[tuple[str, str]] = []

    async def bind(self, pod: PodSpec, node_name: str) -> None:
        self.calls.append((pod.key, node_name))
        if self.error:
            raise self.error


async def test_bind_success() -> None:
    client = RecordingClient()
    binder = DefaultBinder(None, FakeHandle(client=client))
    pod = make_pod("p", namespace="ns")
    assert await binder.bind(CycleState(), pod, "n1") is None
    assert client.calls == [("ns/p", "n1")]


@pytest.mark.parametrize(
    "error", [Conflict("already bound", 409), NotFound("gone", 404), ApiError("boom", 500)]
)
async def test_bind_failure_is_error_status(error: ApiError) -> None:
    binder = DefaultBinder(None, FakeHandle(client=RecordingClient(error)))
    status = await binder.bind(CycleState(), make_pod("p"), "n1")
    assert status is not None
    assert status.code == Code.ERROR
    assert status.error is error
    assert status.message == str(error)


async def test_bind_without_client() -> None:
    status = await DefaultBinder(None, FakeHandle()).bind(CycleState(), make_pod("p"), "n1")
    assert status is not None and status.code == Code.ERROR
