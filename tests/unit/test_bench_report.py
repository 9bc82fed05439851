"""The bench report's derived figures, from plain result dicts as the runner writes them."""

from __future__ import annotations

from kopf_scheduler.bench import report


def _result(scheduler: str, average: float, **cpu: float) -> dict[str, object]:
    return {
        "workload": "W",
        "scheduler": scheduler,
        "measured": {"bound": 1000, "count": 1000, "throughput": {"average": average}, "latency": {}},
        "cpu": cpu,
        "events": {"posted_in_measured_phase": 990.0},
    }


def _cells(table: str) -> dict[str, str]:
    header, _, row = table.splitlines()
    return dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")], strict=True))


def test_machine_cpu_per_pod_and_events_columns() -> None:
    ours = _result(
        "ours", 150.0, scheduler_measured=3.0, apiserver_measured=5.0, etcd_measured=1.0,
        runner_measured=1.0, others_measured=0.5,
    )  # fmt: skip
    cells = _cells(report.results_table([ours]))
    assert cells["all CPU ms/pod"] == "10.5"  # 10.5 CPU s over 1000 pods
    assert cells["events in phase"] == "990"


def test_machine_cpu_per_pod_needs_every_part() -> None:
    partial = _result("reference", 100.0, scheduler_measured=3.0)
    cells = _cells(report.results_table([partial]))
    assert cells["all CPU ms/pod"] == "-" and cells["sched CPU s"] == "3.0"
