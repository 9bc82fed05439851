"""The bench runner end to end at a tiny size: it is not a benchmark, it keeps the runner working.

One workload, all three schedulers (reference, raw-bind, ours), each on its own fresh control plane;
asserts the JSON files carry the figures the docs quote and that every measured pod got bound.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kopf_scheduler_workbench.bench import runner

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

FIELDS = ("average", "p50", "p90", "p99", "overall", "windows")


def test_bench_smoke(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    args = parser.parse_args(
        [
            "--scale", "tiny", "--workloads", "SchedulingBasic/1000Nodes", "--out", str(tmp_path),
            "--schedulers", "reference", "raw-bind", "ours", "--timeout", "60", "--startup-timeout", "60",
            "--profile-apiserver", str(tmp_path / "pprof"), "--profile-apiserver-seconds", "1",
        ]
    )  # fmt: skip
    assert runner.run(args) == 0

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["versions"]["kubernetes"]
    assert summary["machine"]["cpus"] >= 1
    results = {r["scheduler"]: r for r in summary["results"]}
    assert set(results) == {"reference", "raw-bind", "ours"}
    for key, result in results.items():
        assert "error" not in result, (key, result["error"])
        per_run = json.loads((tmp_path / f"SchedulingBasic-1000Nodes--{key}.json").read_text())
        assert per_run["scheduler"] == key
        measured = result["measured"]
        assert measured["count"] == 20
        assert measured["bound"] == 20 and measured["all_bound"], (key, measured)
        assert set(FIELDS) <= set(measured["throughput"])
        latency = measured["latency"]
        assert latency["p50"] is not None and latency["p99"] >= latency["p50"]
        assert result["startup_seconds"] > 0
        assert result["cpu"]["scheduler_measured"] >= 0 and result["cpu"]["apiserver_measured"] > 0
        assert result["memory"]["scheduler_peak_rss_mb"] > 0
        assert result["cpu"]["scheduler_runqueue_wait_measured"] >= 0  # Linux schedstat
        # What the apiserver was asked meanwhile: the runner's 20 creates, the scheduler's 20 binds,
        # and a Scheduled event per pod from both real schedulers (raw-bind posts none).
        requests = result["apiserver_requests"]
        assert requests["POST pods"] == 20 and requests["POST pods/binding"] == 20, requests
        events = result["events"]
        if key == "raw-bind":
            assert events["posted_by_end"] == 0 and "POST events" not in requests, events
        else:
            assert events["posted_by_end"] >= 20 and events["seconds_after_last_bind"] is not None, events
        assert Path(result["apiserver_profile"]).stat().st_size > 0


def test_event_cost_smoke() -> None:
    """bench.eventcost on a real apiserver, a few events a variant: every variant is answered 201
    (protobuf answers included) and the apiserver's CPU is read for each."""
    import asyncio

    from kopf_scheduler_workbench.bench import eventcost
    from kopf_scheduler_workbench.controlplane import running_control_plane

    with running_control_plane() as plane:
        results = asyncio.run(eventcost.measure(plane, events=20, rounds=1, concurrency=4))
    assert set(results) == set(eventcost.VARIANTS)
    for runs in results.values():
        ((apiserver_us, etcd_us, rate),) = runs
        assert apiserver_us >= 0 and etcd_us >= 0 and rate > 0
