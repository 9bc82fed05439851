"""The bench report's derived figures, from plain result dicts as the runner writes them."""

from __future__ import annotations

from kopf_scheduler_workbench.bench import report


def _result(scheduler: str, average: float, **cpu: float) -> dict[str, object]:
    return {
        "workload": "W",
        "scheduler": scheduler,
        "measured": {
            "bound": 1000,
            "count": 1000,
            "throughput": {"average": average, "overall": average / 2},
            "latency": {},
        },
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


def test_repeat_table_lists_each_run_and_the_medians() -> None:
    cpu = dict(scheduler_measured=3.0, apiserver_measured=5.0, etcd_measured=1.0, runner_measured=1.0)
    results = []
    for repeat, (ours, ref, raw) in enumerate(
        [(150.0, 100.0, 300.0), (120.0, 120.0, 240.0), (90.0, 100.0, 180.0)], 1
    ):
        for name, thr, others in (("ours", ours, 0.0), ("reference", ref, 2.0), ("raw-bind", raw, 0.0)):
            r = _result(name, thr, **cpu, others_measured=others)
            r["repeat"] = repeat
            results.append(r)
    cells = _cells(report.repeat_table(results))
    assert cells["runs"] == "3"
    assert cells["thr avg ours/ref, each run"] == "1.50, 1.00, 0.90"
    assert cells["median ours/ref"] == "1.00"
    assert cells["median ours/ceiling"] == "0.50"
    assert cells["overall ours/ref, each run"] == "1.50, 1.00, 0.90"
    assert cells["median all-CPU/pod ours/ref"] == "0.83"  # 10 ms against 12 ms per pod
    # And the per-run tables tell the repeats apart.
    assert "W #2" in report.ratio_table(results) and "W #3" in report.results_table(results)


def test_batching_table_compares_with_unbatched_and_the_baseline_commit() -> None:
    runs = [
        ("ours", 0.8),
        ("ours", 0.9),
        ("ours-unbatched", 1.0),
        ("ours-baseline", 1.2),
        ("ours-baseline", 1.4),
    ]
    results = [_result(name, 100.0, scheduler_measured=ms) for name, ms in runs]  # 1000 pods: s == ms/pod
    cells = _cells(report.batching_table(results))
    assert cells["sched CPU ms/pod batched"] == "0.80 0.90"
    assert cells["baseline"] == "1.20 1.40"
    assert cells["median batched/unbatched"] == "0.85"
    assert cells["median batched/baseline"] == "0.65"  # 0.85 / 1.3
    only_base = [r for r in results if r["scheduler"] != "ours-unbatched"]
    assert _cells(report.batching_table(only_base))["median batched/unbatched"] == "-"
