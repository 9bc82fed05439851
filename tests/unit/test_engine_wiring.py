"""new_engine wires every hook at construction (issue 29): the served profiles and the FitError
hook are its parameters, never attributes set on the parts afterwards."""

from __future__ import annotations

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.config.profile import DEFAULT_SCHEDULER_NAME
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.diagnosis import FitError
from kopf_scheduler.framework.profiles import default_profile
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler_workbench.testing.builders import make_node, make_pod


def test_without_the_default_only_the_given_profiles_are_served() -> None:
    mine = default_profile("mine")
    assert new_engine(MemoryClusterClient(), [mine]).profiles.names() == [DEFAULT_SCHEDULER_NAME, "mine"]
    engine = new_engine(MemoryClusterClient(), [mine], with_default=False)
    assert engine.profiles.names() == ["mine"]
    engine.profiles.remove("mine")  # and the default does not come back in its place
    assert engine.profiles.names() == []


def test_without_the_default_a_given_default_named_profile_is_kept_and_not_restored() -> None:
    engine = new_engine(MemoryClusterClient(), [default_profile()], with_default=False)
    assert engine.profiles.names() == [DEFAULT_SCHEDULER_NAME]
    engine.profiles.remove(DEFAULT_SCHEDULER_NAME)
    assert engine.profiles.names() == []
    engine = new_engine(MemoryClusterClient(), [default_profile()])
    engine.profiles.remove(DEFAULT_SCHEDULER_NAME)
    assert engine.profiles.names() == [DEFAULT_SCHEDULER_NAME]  # with it, removing restores it


async def test_the_fit_error_hook_is_called_with_each_fit_error() -> None:
    seen: list[tuple[str, str, int]] = []

    async def hook(profile: str, pod: Pod, fit: FitError) -> None:
        seen.append((profile, pod.key, fit.num_all_nodes))

    engine = new_engine(MemoryClusterClient(), on_fit_error=hook)
    engine.handlers.add_node(make_node("n1", cpu="1"))
    engine.handlers.add_pod(make_pod("big", cpu="2"))
    engine.handlers.add_pod(make_pod("small", cpu="500m"))
    while await engine.scheduler.schedule_one():
        pass
    await engine.scheduler.wait_for_bindings()
    assert seen == [(DEFAULT_SCHEDULER_NAME, "default/big", 1)]
