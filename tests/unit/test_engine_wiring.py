"""new_engine wires every hook at construction (issue 29): the served profiles and the FitError
hook are its parameters, never attributes set on the parts afterwards; the profiles come built
with the services the scheduler shares with their plugins, and a profile set later (a
SchedulerProfile edit) is built with the same ones."""

from __future__ import annotations

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.config.profile import DEFAULT_SCHEDULER_NAME
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.diagnosis import FitError
from kopf_scheduler.framework.profiles import default_profile, load_profile
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


async def test_a_profile_set_later_is_built_with_the_engines_services_and_configures_its_queue() -> None:
    client = MemoryClusterClient()
    engine = new_engine(client)
    sched = engine.scheduler
    # What the SchedulerProfile controller does on an edit: no SchedulingGates in "other".
    spec = {"schedulerName": "other", "plugins": {"preEnqueue": {"disabled": [{"name": "SchedulingGates"}]}}}
    other = engine.profiles.set(load_profile(spec))
    default = engine.profiles.get(DEFAULT_SCHEDULER_NAME)
    assert default is not None
    for fw in (default, other):
        assert fw.snapshot is sched.snapshot and fw.client is client and fw.nominator is sched.nominator
    assert other.dra is default.dra  # one DRA manager for every profile, its claims in flight kept
    engine.handlers.add_node(make_node("n1", cpu="2"))
    # The queue asks the new profile's PreEnqueue plugins: its gated pod is not held back.
    gates = [{"name": "wait"}]
    engine.handlers.add_pod(make_pod("mine", cpu="1", schedulingGates=gates))
    engine.handlers.add_pod(make_pod("theirs", cpu="1", scheduler_name="other", schedulingGates=gates))
    assert engine.queue.pending_pods()["gated"] == 1
    while await sched.schedule_one():
        pass
    await sched.wait_for_bindings()
    # Bound through the engine's client by the new profile's binder, on the scheduler's snapshot.
    assert client.bindings == {"default/theirs": "n1"}
