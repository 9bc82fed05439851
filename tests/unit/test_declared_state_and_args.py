"""What plugins hand the framework is declared, not probed (issue 29): cycle state is ``StateData``
(checked when written, so ``CycleState.clone`` never guesses), and a plugin's pluginConfig model is
its declared ``Args`` (checked when the class is registered, read from the registry after)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from kopf_scheduler.config.profile import ProfileError
from kopf_scheduler.framework.interface import CycleState, Plugin, StateData
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import PluginCapabilityError, Registry, default_registry


class Counts:
    """A mutable state: its clone is a copy a what-if run may change."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def clone(self) -> Counts:
        return Counts(dict(self.counts))


def test_written_state_must_be_state_data() -> None:
    state = CycleState()
    with pytest.raises(
        TypeError, match=r"cycle state 'PreFilterMine': dict is not StateData \(no clone\(\)\)"
    ):
        state.write("PreFilterMine", {"a": 1})  # type: ignore[arg-type]
    assert state.get("PreFilterMine") is None  # nothing was written
    state.write("PreFilterMine", Counts({"a": 1}))
    assert isinstance(state.read("PreFilterMine"), StateData)


def test_a_clone_clones_every_value() -> None:
    state = CycleState()
    state.write("k", Counts({"a": 1}))
    copy = state.clone()
    copy.read("k").counts["a"] = 2  # a preemption what-if run changes its copy...
    assert state.read("k").counts == {"a": 1}  # ...and not the cycle's


class Sort(Plugin):
    name = "Sort"

    def less(self, a: Any, b: Any) -> bool:
        return False


class Binder(Plugin):
    name = "Binder"

    async def bind(self, state: Any, pod: Any, node_name: str) -> None:
        return None


class LimitArgs(BaseModel):
    limit: int = 3


class Limited(Plugin):
    name = "Limited"
    Args = LimitArgs

    def filter(self, state: Any, pod: Any, node_info: Any) -> None:
        return None


class Plain(Plugin):
    name = "Plain"

    def filter(self, state: Any, pod: Any, node_info: Any) -> None:
        return None


def test_args_that_are_no_model_are_refused_at_registration() -> None:
    class Wrong(Plain):
        Args = dict  # type: ignore[assignment]

    refused = r"has Args = <class 'dict'>, which is no dataclass nor pydantic model"
    with pytest.raises(PluginCapabilityError, match=refused):
        Registry().register("Wrong", Wrong)

    class NotAPlugin:  # out-of-tree, without the base class: checked all the same
        name = "NotAPlugin"
        Args = "limit: int"

        def filter(self, state: Any, pod: Any, node_info: Any) -> None:
            return None

    with pytest.raises(PluginCapabilityError, match="NotAPlugin"):
        Registry().register("NotAPlugin", NotAPlugin)


def test_the_registry_hands_out_the_declared_args_model() -> None:
    reg = Registry({"Limited": Limited, "Plain": Plain})
    assert reg.args_model("Limited") is LimitArgs
    assert reg.args_model("Plain") is None  # Plugin's default: no args
    assert reg.copy().args_model("Limited") is LimitArgs
    assert default_registry().args_model("NodeResourcesFit") is not None


def _profile(config: list[dict[str, Any]]) -> dict[str, Any]:
    enabled = [{"name": n} for n in ("Sort", "Binder", "Limited", "Plain")]
    return {
        "schedulerName": "s",
        "plugins": {"multiPoint": {"enabled": enabled, "disabled": [{"name": "*"}]}},
        "pluginConfig": config,
    }


def test_a_profile_validates_args_with_the_declared_model() -> None:
    reg = Registry({"Sort": Sort, "Binder": Binder, "Limited": Limited, "Plain": Plain})
    resolved = load_profile(_profile([{"name": "Limited", "args": {"limit": 5}}]), reg).resolved
    assert resolved is not None
    assert resolved.args["Limited"] == LimitArgs(limit=5)
    assert resolved.args["Plain"] is None
    defaulted = load_profile(_profile([]), reg).resolved
    assert defaulted is not None and defaulted.args["Limited"] == LimitArgs()  # the model's defaults
    with pytest.raises(ProfileError, match="plugin 'Plain' takes no args"):
        load_profile(_profile([{"name": "Plain", "args": {"limit": 1}}]), reg)
