"""The bench report's derived figures, from plain result dicts as the runner writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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


def _run(
    workload: str, scheduler: str, repeat: int, thr: float | None, first_bind: float, rss: float
) -> dict[str, Any]:
    windows = [thr, thr, thr] if thr is not None else []
    return {
        "workload": workload,
        "scheduler": scheduler,
        "repeat": repeat,
        "params": {"threshold": 680.0 if workload.startswith("SchedulingBasic") else None},
        "startup_seconds": first_bind,
        "memory": {"scheduler_peak_rss_mb": rss},
        "measured": {
            "bound": 30,
            "count": 30,
            "seconds": 30.0,
            "throughput": {"average": thr, "windows": windows},
            "latency": {},
        },
    }


def _perf_results() -> list[dict[str, Any]]:
    """Three interleaved repeats of a throughput workload and a start-up one."""
    basic = [(900.0, 600.0, 1000.0), (700.0, 700.0, 1400.0), (800.0, 400.0, 900.0)]
    firsts = [(0.5, 0.4), (0.3, 0.6), (0.4, 0.4)]
    out = []
    for repeat, ((ours, ref, raw), (f_ours, f_ref)) in enumerate(zip(basic, firsts, strict=True), 1):
        out.append(_run("SchedulingBasic/5000Nodes_10000Pods", "ours", repeat, ours, f_ours, 500.0))
        out.append(_run("SchedulingBasic/5000Nodes_10000Pods", "reference", repeat, ref, f_ref, 1000.0))
        out.append(_run("SchedulingBasic/5000Nodes_10000Pods", "raw-bind", repeat, raw, 0.1, 100.0))
    for repeat, (rss_ours, rss_ref) in enumerate([(800.0, 600.0), (900.0, 600.0), (700.0, 700.0)], 1):
        out.append(_run("StartUp/5000Nodes_50000Pods", "ours", repeat, None, 2.0 * repeat, rss_ours))
        out.append(_run("StartUp/5000Nodes_50000Pods", "reference", repeat, None, 3.0, rss_ref))
    return out


def _rows(table: str) -> dict[str, dict[str, str]]:
    header, _, *rows = table.splitlines()
    names = [c.strip() for c in header.split("|")]
    out = {}
    for row in rows:
        cells = dict(zip(names, [c.strip() for c in row.split("|")], strict=True))
        out[cells["workload"]] = cells
    return out


def test_median_table_gives_medians_of_each_repeats_quotients() -> None:
    rows = _rows(report.median_table(_perf_results()))
    basic = rows["SchedulingBasic/5000Nodes_10000Pods"]
    assert basic["runs"] == "3"
    assert basic["scheduler_perf threshold"] == "680"
    assert basic["thr avg ours / ref / ceiling"] == "800 / 600 / 1000"
    # Per repeat 1.50, 1.00, 2.00: the median of the quotients (not 800/600 = 1.33).
    assert basic["thr ours/ref"] == "1.50"
    assert basic["thr ours/ceiling"] == "0.89"  # 0.90, 0.50, 0.89
    assert basic["first bind ours/ref"] == "1.00"  # 1.25, 0.50, 1.00
    assert basic["peak RSS ours/ref"] == "0.50"
    assert basic["phase s ours / ref"] == "30.0 / 30.0"
    startup = rows["StartUp/5000Nodes_50000Pods"]
    assert startup["thr avg ours / ref / ceiling"] == "-" and startup["thr ours/ref"] == "-"
    assert startup["first bind s ours / ref"] == "4.00 / 3.00"
    assert startup["first bind ours/ref"] == "1.33"  # 0.67, 1.33, 2.00
    assert startup["peak RSS MB ours / ref"] == "800 / 600"
    assert startup["peak RSS ours/ref"] == "1.33"  # 1.33, 1.50, 1.00
    assert startup["scheduler_perf threshold"] == "-"


def test_median_table_without_a_reference_run_leaves_the_quotients_out() -> None:
    alone = [r for r in _perf_results() if r["scheduler"] == "ours"]
    basic = _rows(report.median_table(alone))["SchedulingBasic/5000Nodes_10000Pods"]
    assert basic["thr ours/ref"] == "-" and basic["first bind ours/ref"] == "-"
    assert basic["thr avg ours / ref / ceiling"] == "800 / - / -"


def test_median_table_adds_the_ceiling_with_events_only_when_it_ran() -> None:
    assert "thr ours/ceiling with events" not in report.median_table(_perf_results())
    with_events = _perf_results() + [
        _run("SchedulingBasic/5000Nodes_10000Pods", "raw-bind-events", repeat, thr, 0.1, 100.0)
        for repeat, thr in ((1, 1000.0), (2, 800.0), (3, 1600.0))
    ]
    rows = _rows(report.median_table(with_events))
    basic = rows["SchedulingBasic/5000Nodes_10000Pods"]
    assert basic["thr ours/ceiling with events"] == "0.88"  # 0.90, 0.88, 0.50
    assert basic["thr ours/ceiling"] == "0.89"  # the ceiling is still raw-bind's
    assert rows["StartUp/5000Nodes_50000Pods"]["thr ours/ceiling with events"] == "-"


def test_panel_grid_has_no_empty_cell() -> None:
    assert report.panel_grid(4) == [(0, 0, 1), (0, 1, 1), (1, 0, 1), (1, 1, 1)]
    assert report.panel_grid(3) == [(0, 0, 1), (0, 1, 1), (1, 0, 2)]  # the last spans its row
    assert report.panel_grid(1, cols=1) == [(0, 0, 1)]
    assert report.panel_grid(0) == []


def test_chart_has_one_panel_per_workload_that_ran(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    results = _perf_results()
    results.append(_run("GangScheduling/5000Nodes_3000Gangs_9000Pods", "ours", 1, 300.0, 0.5, 400.0))
    failed = _run("TopologySpreading", "ours", 1, None, 0.5, 0.0)
    del failed["startup_seconds"]  # bound nothing: not a workload that ran
    results.append(failed)
    fig = report.figure(results)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [
        "SchedulingBasic/5000Nodes_10000Pods",
        "StartUp/5000Nodes_50000Pods: first bind",
        "GangScheduling/5000Nodes_3000Gangs_9000Pods",
    ]
    assert fig.axes[2].get_subplotspec().colspan == range(0, 2)  # the odd one out spans the row
    basic = fig.axes[0]
    assert len(basic.get_lines()) == 9  # three repeats of three schedulers
    assert [t.get_text() for t in basic.get_legend().get_texts()] == [
        "ours (3 runs)",
        "reference (3 runs)",
        "raw-bind (ceiling) (3 runs)",
    ]
    assert [p.get_height() for p in fig.axes[1].patches] == [4.0, 3.0]  # median first bind
    path = report.chart(results, tmp_path / "chart.png")
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.chart(results[:0], tmp_path / "none.png") is None
