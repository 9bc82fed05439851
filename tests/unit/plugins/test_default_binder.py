"""DefaultBinder: binds through the client, retries transient failures as the reference's
``util.BindPod``, and turns API failures into Error statuses."""

from __future__ import annotations

import pytest
from node_plugin_helpers import FakeHandle

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.framework.client import ApiError, Conflict, NotFound, TransientError
from kopf_scheduler.framework.interface import Code, CycleState
from kopf_scheduler.plugins.default_binder import BIND_ATTEMPTS, DefaultBinder
from kopf_scheduler_workbench.testing.builders import make_pod


class RecordingClient:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[tuple[str, str]] = []

    async def bind(self, pod: Pod, node_name: str) -> None:
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


class FlakyClient(RecordingClient):
    """Raises the given errors in turn, then binds."""

    def __init__(self, *errors: Exception) -> None:
        super().__init__()
        self.errors = list(errors)

    async def bind(self, pod: Pod, node_name: str) -> None:
        self.calls.append((pod.key, node_name))
        if self.errors:
            raise self.errors.pop(0)


def binder_for(client: RecordingClient) -> tuple[DefaultBinder, list[float]]:
    binder = DefaultBinder(None, FakeHandle(client=client))
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    binder.sleep = sleep  # type: ignore[method-assign]
    return binder, slept


async def test_transient_errors_are_retried_with_client_go_default_backoff() -> None:
    client = FlakyClient(TransientError("unavailable", 503, "ServiceUnavailable"), TransientError("refused"))
    binder, slept = binder_for(client)
    assert await binder.bind(CycleState(), make_pod("p", namespace="ns"), "n1") is None
    assert client.calls == [("ns/p", "n1")] * 3
    # 10 ms, then x5, each with up to 10 % jitter (retry.DefaultBackoff)
    assert len(slept) == 2
    assert 0.010 <= slept[0] <= 0.011 and 0.050 <= slept[1] <= 0.055


async def test_four_transient_failures_give_up_with_the_last_error() -> None:
    errors = [TransientError(f"internal {i}", 500, "InternalError") for i in range(5)]
    client = FlakyClient(*errors)
    binder, slept = binder_for(client)
    status = await binder.bind(CycleState(), make_pod("p"), "n1")
    assert status is not None and status.code == Code.ERROR and status.error is errors[3]
    assert len(client.calls) == BIND_ATTEMPTS == 4 and len(slept) == 3
    assert 0.250 <= slept[2] <= 0.275


@pytest.mark.parametrize(
    "error",
    [
        Conflict("already bound", 409, "Conflict"),
        NotFound("gone", 404, "NotFound"),
        ApiError("server timeout", 500, "ServerTimeout"),  # a known reason other than InternalError
        ApiError("ClientOSError: connection reset"),  # may have been applied: not retried
        ApiError("too many requests", 429, "TooManyRequests"),
    ],
)
async def test_other_errors_are_not_retried(error: ApiError) -> None:
    client = FlakyClient(error)
    binder, slept = binder_for(client)
    status = await binder.bind(CycleState(), make_pod("p"), "n1")
    assert status is not None and status.error is error
    assert len(client.calls) == 1 and slept == []
