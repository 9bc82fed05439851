"""run --explain-annotation: each FitError goes to the hook; the summary is compact and bounded."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.diagnosis import FitError
from kopf_scheduler.framework.fit_summary import fit_summary
from kopf_scheduler_workbench.testing.builders import make_node, make_pod
from kopf_scheduler_workbench.testing.fake_client import FakeClusterClient


def _fail(nodes: list[Any], pod: Pod, limit: int = 4096) -> tuple[dict[str, Any], str, str]:
    """Schedule ``pod`` once; return the hook's summary, the FailedScheduling message and the raw text."""
    seen: list[tuple[str, Pod, FitError]] = []

    async def hook(profile: str, p: Pod, fit: FitError) -> None:
        seen.append((profile, p, fit))

    async def go() -> str:
        client = FakeClusterClient()
        engine = new_engine(client, on_fit_error=hook)
        sched, handlers = engine.scheduler, engine.handlers
        for n in nodes:
            handlers.add_node(n)
        handlers.add_pod(pod)
        await sched.schedule_one()
        await sched.wait_for_bindings()
        return client.failed_messages(pod.key)[-1]

    message = asyncio.run(go())
    [(profile, _, fit)] = seen
    text = fit_summary(fit, profile, limit)
    return json.loads(text), message, text


def test_summary_counts_match_the_failed_scheduling_message() -> None:
    taint = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    nodes = [make_node("a", cpu="1"), make_node("b", cpu="1"), make_node("c", cpu="8", taints=taint)]
    doc, message, _ = _fail(nodes, make_pod("web", cpu="2"))
    assert doc["profile"] == "kopf-scheduler" and doc["nodes"] == 3
    assert doc["filter"] == {
        "NodeResourcesFit": {"Insufficient cpu": 2},
        "TaintToleration": {"node(s) had untolerated taint(s)": 1},
    }
    assert message.startswith("0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 ")
    assert message.endswith(doc["postFilter"])  # preemption's verdict, as in the event


def test_summary_is_bounded_dropping_the_rarest_reasons() -> None:
    # One reason per node: node i lacks only the i-th of the pod's sixty extended resources (1.37's
    # taint reason no longer names the taint, so taints cannot make the reasons differ).
    names = [f"example.com/{'r' * 40}{i}" for i in range(60)]
    nodes = [make_node(f"n{i}", extra={n: "1" for n in names if n != names[i]}) for i in range(60)]
    nodes += [make_node(f"small{i}", cpu="1", extra=dict.fromkeys(names, "1")) for i in range(5)]
    pod = make_pod("p", cpu="2", resources=dict.fromkeys(names, "1"))
    doc, _, text = _fail(nodes, pod, limit=1024)
    assert len(text.encode()) <= 1024
    assert doc["truncated"] > 0
    # The most common reason survives: 5 nodes short of cpu outweigh each single-node taint.
    kept = doc["filter"]["NodeResourcesFit"]
    assert kept["Insufficient cpu"] == 5
    # What was cut is the rarest (single-node) reasons, and the count says how many.
    assert all(count == 1 for reason, count in kept.items() if reason != "Insufficient cpu")
    assert len(kept) - 1 + doc["truncated"] == 60
