"""Two replicas on the peering object: exactly one binds; SIGKILL of the leader hands over within
the lease duration (15 s) plus a retry period or two, as kube-scheduler's Lease does."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_operator_helpers import (
    Replica,
    create,
    deploy,
    get_json,
    node,
    node_of,
    pod,
    reason_events,
    wait_for,
)

pytestmark = pytest.mark.integration

TAKEOVER_LIMIT = 21.0  # leaseDuration 15 s after the last renewal seen + retries (2 s x [1, 1.2))


@pytest.fixture(scope="module")
def pair(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, list[Replica]]]:
    sa = deploy(control_plane)
    ns = f"ha-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", ns)
    logs: Path = tmp_path_factory.mktemp("ha")
    first = Replica(sa, f"peering-{ns}", [ns], f"{ns}-a", logs)
    wait_for(lambda: first.ready() and first.leading(), 60, what=f"first replica leading:\n{first.logs()}")
    second = Replica(sa, f"peering-{ns}", [ns], f"{ns}-b", logs)
    wait_for(second.ready, 60, what=f"second replica synced:\n{second.logs()}")
    replicas = [first, second]
    try:
        yield ns, replicas
    finally:
        for r in replicas:
            r.kill()


def test_only_one_replica_binds(control_plane: ControlPlane, pair: tuple[str, list[Replica]]) -> None:
    ns, (first, second) = pair
    time.sleep(3)  # let keep-alives settle: the later (lower-priority) replica must be standing by
    assert first.leading() and not second.leading()
    tag = uuid.uuid4().hex[:6]
    create(control_plane, node(f"ha-{tag}-1", labels={"t": tag}), node(f"ha-{tag}-2", labels={"t": tag}))
    names = [f"p{i}-{tag}" for i in range(20)]
    create(control_plane, *(pod(n, ns, node_selector={"t": tag}) for n in names))
    for n in names:
        wait_for(partial(node_of, control_plane, ns, n), 30, what=n)
    instances = set()
    for n in names:
        scheduled = wait_for(partial(reason_events, control_plane, ns, n, "Scheduled"), 15)
        assert len(scheduled) == 1, scheduled
        instances.add(scheduled[0]["reportingInstance"])
    assert instances == {f"kopf-scheduler-{first.name}"}
    assert second.metric("scheduler_schedule_attempts_total") == 0
    assert second.metric("scheduler_bind_errors_total") == 0


def test_leader_sigkill_hands_over(control_plane: ControlPlane, pair: tuple[str, list[Replica]]) -> None:
    ns, (first, second) = pair
    assert first.leading()
    tag = uuid.uuid4().hex[:6]
    create(control_plane, node(f"ho-{tag}", labels={"t": tag}))
    killed = time.monotonic()
    first.kill()
    name = f"after-kill-{tag}"
    create(control_plane, pod(name, ns, node_selector={"t": tag}))
    wait_for(
        lambda: node_of(control_plane, ns, name), TAKEOVER_LIMIT + 10, interval=0.1, what="takeover bind"
    )
    takeover = time.monotonic() - killed
    print(f"takeover: pod bound {takeover:.1f}s after SIGKILL of the leader")
    assert second.leading()
    assert takeover < TAKEOVER_LIMIT, f"takeover took {takeover:.1f}s\n{second.logs()}"
    peering = get_json(control_plane, "clusterkopfpeering", f"peering-{ns}")
    assert second.name in (peering.get("status") or {})
