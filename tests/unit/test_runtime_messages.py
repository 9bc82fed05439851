"""Runtime messages quote plugin names like the reference's Go ``%q``, and PostFilter results pass through."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.framework.interface import Code, CycleState, Plugin, PostFilterResult, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.runtime import Framework, FrameworkError, go_quote
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler_workbench.testing.builders import make_node, make_pod


class Sort(Plugin):
    name = "Sort"

    def less(self, a: Any, b: Any) -> bool:
        return False


class Broken(Plugin):
    """Errors at every scheduling-cycle point it implements."""

    name = "Broken"

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Any:
        return None, Status(Code.ERROR, "boom")

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        return Status(Code.ERROR, "boom")

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status | None:
        return Status(Code.ERROR, "boom")

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        return 0, Status(Code.ERROR, "boom")

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return Status(Code.ERROR, "boom")

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        pass

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status | None, float]:
        return Status(Code.ERROR, "boom"), 0.0

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return Status(Code.ERROR, "boom")

    async def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return Status(Code.ERROR, "boom")


class Binder(Plugin):
    name = "Binder"

    async def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return None


class Waiter(Plugin):
    name = "Waiter"

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status | None, float]:
        return Status(Code.WAIT), 10.0


class PostFilterError(Plugin):
    name = "PFError"

    def post_filter(self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]) -> Any:
        return None, Status(Code.ERROR, "no nodes available")


class ClearNomination(Plugin):
    """Answers like DefaultPreemption when no node helps: clear the nomination."""

    name = "Clear"

    def post_filter(self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]) -> Any:
        return PostFilterResult(""), Status(Code.UNSCHEDULABLE, "preemption: not helpful")


class Noop(Plugin):
    name = "Noop"

    def post_filter(self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]) -> Any:
        return None, Status(Code.UNSCHEDULABLE, "nothing to do")


REG = Registry({c.name: c for c in (Sort, Binder, Broken, Waiter, PostFilterError, ClearNomination, Noop)})


def framework(*names: str) -> Framework:
    info = NodeInfo()
    info.set_node(make_node("n1", cpu="4"))
    binder = [] if "Broken" in names else [{"name": "Binder"}]
    enabled = [{"name": "Sort"}, *binder] + [{"name": n} for n in names]
    multi = {"enabled": enabled, "disabled": [{"name": "*"}]}
    spec = {"schedulerName": "t", "plugins": {"multiPoint": multi}}
    return Framework(load_profile(spec, REG), REG, snapshot=Snapshot([info]))


def test_go_quote_matches_strconv_quote() -> None:
    assert go_quote("NodeResourcesFit") == '"NodeResourcesFit"'
    assert go_quote('a"b\\c') == '"a\\"b\\\\c"'
    assert go_quote("tab\there\n") == '"tab\\there\\n"'
    assert go_quote("\x00") == '"\\x00"'
    assert go_quote("ü") == '"ü"'


def test_error_messages_quote_plugin_names_like_go() -> None:
    fw = framework("Broken")
    pod = make_pod("web")
    state = CycleState()
    _, status, _ = fw.run_pre_filter_plugins(state, pod)
    assert status is not None and status.message == 'running PreFilter plugin "Broken": boom'
    node = fw.snapshot.node_infos[0]
    status = fw.run_filter_plugins(CycleState(), pod, node)
    assert status is not None and status.message == 'running "Broken" filter plugin: boom'
    status = fw.run_pre_score_plugins(CycleState(), pod, [node])
    assert status is not None and status.message == 'running PreScore plugin "Broken": boom'
    with pytest.raises(FrameworkError) as exc:
        fw.run_score_plugins(CycleState(), pod, np.arange(1), [node])
    assert str(exc.value) == 'running Score plugins: plugin "Broken" failed with: boom'
    status = fw.run_reserve_plugins_reserve(CycleState(), pod, "n1")
    assert status is not None and status.message == 'running Reserve plugin "Broken": boom'
    status = fw.run_permit_plugins(CycleState(), pod, "n1")
    assert status is not None and status.message == 'running Permit plugin "Broken": boom'
    status = asyncio.run(fw.run_pre_bind_plugins(CycleState(), pod, "n1"))
    assert status is not None and status.message == 'running PreBind plugin "Broken": boom'
    status = asyncio.run(fw.run_bind_plugins(CycleState(), pod, "n1"))
    assert status is not None and status.message == 'running Bind plugin "Broken": boom'


def test_permit_wait_message_quotes_the_pod_name() -> None:
    fw = framework("Waiter")
    status = fw.run_permit_plugins(CycleState(), make_pod("web-0"), "n1")
    assert status is not None and status.is_wait()
    assert status.message == 'one or more plugins asked to wait and no plugin rejected pod "web-0"'


def test_post_filter_error_is_passed_through_unprefixed() -> None:
    fw = framework("PFError")
    result, status = fw.run_post_filter_plugins(CycleState(), make_pod("p"), {})
    assert result is None
    assert status.code == Code.ERROR and status.message == "no nodes available" and status.plugin == "PFError"


def test_post_filter_empty_nomination_is_carried_through() -> None:
    fw = framework("Clear")
    result, status = fw.run_post_filter_plugins(CycleState(), make_pod("p"), {})
    assert result == PostFilterResult("")
    assert status.code == Code.UNSCHEDULABLE and status.plugin == "Clear"
    # No result at all stays "leave the nomination alone".
    result, _ = framework("Noop").run_post_filter_plugins(CycleState(), make_pod("p"), {})
    assert result is None


def test_volume_binding_missing_state_is_the_cycle_states_not_found() -> None:
    from kopf_scheduler.plugins.volume_binding import VolumeBinding

    # v1.37.2's getStateData returns CycleState.Read's ErrNotFound as it is (no wrapping).
    status = asyncio.run(VolumeBinding().pre_bind(CycleState(), make_pod("p"), "n1"))
    assert status is not None and status.code == Code.ERROR
    assert status.message == "not found"
