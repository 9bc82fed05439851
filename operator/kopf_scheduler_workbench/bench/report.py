"""Tables and the throughput chart for the bench runner's results (plain dicts, as in the JSON)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "SCHEDULERS",
    "batching_table",
    "chart",
    "figure",
    "median_table",
    "panel_grid",
    "ratio_table",
    "repeat_table",
    "results_table",
    "write_json",
]

# Display order and labels: ours, the reference, the no-logic ceiling.
SCHEDULERS = ("ours", "ours-unbatched", "ours-baseline", "reference", "raw-bind", "raw-bind-events")

Result = Mapping[str, Any]


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _get(result: Result, *path: str) -> Any:
    cur: Any = result
    for key in path:
        if not isinstance(cur, Mapping) or key not in cur:
            return None
        cur = cur[key]
    return cur


def _ms(seconds: Any) -> Any:
    return None if seconds is None else seconds * 1000.0


def _label(r: Result) -> str:
    """The workload, with ``#n`` when the run was one of several repeats (``--repeat``)."""
    repeat = r.get("repeat")
    return f"{r['workload']} #{repeat}" if repeat else str(r["workload"])


def _rows(results: Sequence[Result]) -> list[list[str]]:
    rows = []
    for r in results:
        m = r.get("measured") or {}
        thr = m.get("throughput") or {}
        lat = m.get("latency") or {}
        rows.append(
            [
                _label(r),
                str(r["scheduler"]),
                f"{m.get('bound', 0)}/{m.get('count', 0)}",
                _fmt(thr.get("average")),
                _fmt(thr.get("p50")),
                _fmt(thr.get("p90")),
                _fmt(thr.get("p99")),
                _fmt(thr.get("overall")),
                _fmt(_ms(lat.get("p50")), 0),
                _fmt(_ms(lat.get("p99")), 0),
                _fmt(r.get("startup_seconds"), 2),
                _fmt(_get(r, "cpu", "scheduler_measured")),
                _fmt(_get(r, "cpu", "scheduler_total")),
                _fmt(_get(r, "memory", "scheduler_peak_rss_mb"), 0),
                _fmt(_get(r, "cpu", "apiserver_measured")),
                _fmt(_get(r, "cpu", "others_measured")),
                _fmt(_machine_ms_per_pod(r)),
                _fmt(_get(r, "events", "posted_in_measured_phase"), 0),
                _fmt(_get(r, "cpu", "scheduler_runqueue_wait_measured")),
            ]
        )
    return rows


def _machine_ms_per_pod(r: Result) -> float | None:
    """All busy CPU of the measured phase (scheduler, apiserver, etcd, runner, others) per pod bound.

    On a saturated machine throughput is about cores / this: the figure that says what a
    scheduler costs the whole control plane, not only itself.
    """
    cpu = r.get("cpu") or {}
    parts = [f"{p}_measured" for p in ("scheduler", "apiserver", "etcd", "runner", "others")]
    bound = _get(r, "measured", "bound")
    if not bound or any(not isinstance(cpu.get(k), int | float) for k in parts):
        return None
    return 1000.0 * sum(float(cpu[k]) for k in parts) / float(bound)


def _sched_ms_per_pod(r: Result) -> float | None:
    """The scheduler's own CPU in the measured phase per pod bound."""
    cpu = _get(r, "cpu", "scheduler_measured")
    bound = _get(r, "measured", "bound")
    if not bound or not isinstance(cpu, int | float):
        return None
    return 1000.0 * float(cpu) / float(bound)


def batching_table(results: Sequence[Result]) -> str:
    """Where ours ran with and without OpportunisticBatching (and, if it ran, as it was at the
    baseline commit): scheduler CPU per pod, each run, and the medians' ratios (below 1: less CPU)."""
    header = ["workload", "runs", "sched CPU ms/pod batched", "unbatched", "baseline"]
    header += ["median batched/unbatched", "median batched/baseline"]
    keys = ("ours", "ours-unbatched", "ours-baseline")
    by: dict[str, dict[str, list[float]]] = {}
    for r in results:
        if r.get("scheduler") in keys and (v := _sched_ms_per_pod(r)) is not None:
            by.setdefault(str(r["workload"]), {}).setdefault(str(r["scheduler"]), []).append(v)
    rows = []
    for workload, runs in by.items():
        on, off, base = (runs.get(k, []) for k in keys)
        if not on or not (off or base):
            continue
        rows.append(
            [
                workload,
                str(max(len(on), len(off), len(base))),
                " ".join(_fmt(v, 2) for v in on),
                " ".join(_fmt(v, 2) for v in off) or "-",
                " ".join(_fmt(v, 2) for v in base) or "-",
                _fmt(_quotient(_median(on), _median(off)), 2) if off else "-",
                _fmt(_quotient(_median(on), _median(base)), 2) if base else "-",
            ]
        )
    return _markdown(header, rows) if rows else ""


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |",
        "| " + " | ".join("-" * w for w in widths) + " |",
    ]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    return "\n".join(lines)


def results_table(results: Sequence[Result]) -> str:
    """One row per (workload, scheduler): throughput, latency, start-up, CPU, memory."""
    header = [
        "workload", "scheduler", "bound", "thr avg", "thr p50", "thr p90", "thr p99", "overall",
        "lat p50 ms", "lat p99 ms", "first bind s", "sched CPU s", "sched CPU s (all)", "RSS MB",
        "apiserver CPU s", "others CPU s", "all CPU ms/pod", "events in phase",
        "sched CPU wait s",
    ]  # fmt: skip
    return _markdown(header, _rows(results))


def _quotient(a: Any, b: Any) -> float | None:
    if not isinstance(a, int | float) or not isinstance(b, int | float) or not b:
        return None
    return float(a) / float(b)


def _ratio(a: Any, b: Any) -> str:
    return _fmt(_quotient(a, b), 2)


def ratio_table(results: Sequence[Result]) -> str:
    """ours/reference and ours/ceiling per workload (throughput: higher is better for ours)."""
    by: dict[str, dict[str, Result]] = {}
    for r in results:
        by.setdefault(_label(r), {})[str(r["scheduler"])] = r
    header = [
        "workload", "thr avg ours/ref", "thr avg ours/ceiling", "lat p99 ours/ref", "CPU ours/ref",
        "first bind ours/ref",
    ]  # fmt: skip
    rows = []
    for workload, runs in by.items():
        ours, ref, raw = runs.get("ours", {}), runs.get("reference", {}), runs.get("raw-bind", {})
        rows.append(
            [
                workload,
                _ratio(
                    _get(ours, "measured", "throughput", "average"),
                    _get(ref, "measured", "throughput", "average"),
                ),
                _ratio(
                    _get(ours, "measured", "throughput", "average"),
                    _get(raw, "measured", "throughput", "average"),
                ),
                _ratio(_get(ours, "measured", "latency", "p99"), _get(ref, "measured", "latency", "p99")),
                _ratio(_get(ours, "cpu", "scheduler_measured"), _get(ref, "cpu", "scheduler_measured")),
                _ratio(ours.get("startup_seconds"), ref.get("startup_seconds")),
            ]
        )
    return _markdown(header, rows)


def _median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def repeat_table(results: Sequence[Result]) -> str:
    """Per workload over its repeats: each run's ours/reference throughput, then medians.

    One run of a few thousand pods moves by 20% or more on a shared 2-core machine; the claim
    rests on every run and on the median, not on one lucky run.
    """
    runs = _by_workload_and_repeat(results)
    header = [
        "workload", "runs", "thr avg ours/ref, each run", "median ours/ref", "median ours/ceiling",
        "overall ours/ref, each run", "median all-CPU/pod ours/ref",
    ]  # fmt: skip
    rows = []
    for workload, by_repeat in runs.items():
        vs_ref: list[float] = []
        vs_ceiling: list[float] = []
        overall: list[float] = []  # pods / (last bind - first POST): fairer for bursty workloads
        cost: list[float] = []
        for _, by in sorted(by_repeat.items()):
            ours, ref, raw = by.get("ours", {}), by.get("reference", {}), by.get("raw-bind", {})
            thr = _get(ours, "measured", "throughput", "average")
            if (q := _quotient(thr, _get(ref, "measured", "throughput", "average"))) is not None:
                vs_ref.append(q)
            o_ours = _get(ours, "measured", "throughput", "overall")
            if (q := _quotient(o_ours, _get(ref, "measured", "throughput", "overall"))) is not None:
                overall.append(q)
            if (q := _quotient(thr, _get(raw, "measured", "throughput", "average"))) is not None:
                vs_ceiling.append(q)
            if (q := _quotient(_machine_ms_per_pod(ours), _machine_ms_per_pod(ref))) is not None:
                cost.append(q)
        rows.append(
            [
                workload,
                str(len(by_repeat)),
                ", ".join(f"{q:.2f}" for q in vs_ref) or "-",
                _fmt(_median(vs_ref), 2),
                _fmt(_median(vs_ceiling), 2),
                ", ".join(f"{q:.2f}" for q in overall) or "-",
                _fmt(_median(cost), 2),
            ]
        )
    return _markdown(header, rows)


def _by_workload_and_repeat(results: Sequence[Result]) -> dict[str, dict[Any, dict[str, Result]]]:
    """workload -> repeat -> scheduler -> result, workloads in the order they ran."""
    runs: dict[str, dict[Any, dict[str, Result]]] = {}
    for r in results:
        runs.setdefault(str(r["workload"]), {}).setdefault(r.get("repeat") or 1, {})[str(r["scheduler"])] = r
    return runs


def _medians_of(by_repeat: Mapping[Any, Mapping[str, Result]], key: str, *path: str) -> float | None:
    values = [v for by in by_repeat.values() if isinstance(v := _get(by.get(key, {}), *path), int | float)]
    return _median([float(v) for v in values])


def _median_ratio(
    by_repeat: Mapping[Any, Mapping[str, Result]], over: str, path: Sequence[str]
) -> float | None:
    """The median over repeats of ours/``over`` for the figure at ``path``: each repeat's pair ran
    back to back (interleaved), so their quotient cancels what drifted between repeats."""
    quotients = [
        q
        for by in by_repeat.values()
        if (q := _quotient(_get(by.get("ours", {}), *path), _get(by.get(over, {}), *path))) is not None
    ]
    return _median(quotients)


def _pair(a: Any, b: Any, digits: int) -> str:
    return "-" if a is None and b is None else f"{_fmt(a, digits)} / {_fmt(b, digits)}"


def median_table(results: Sequence[Result]) -> str:
    """One row per workload: medians over the repeats of ours/reference and ours/ceiling (raw-bind)
    throughput, first bind ours/reference, peak RSS ours/reference, with the medians they divide.

    The claims of issue 30 are read from this table: throughput and ceiling on the long phases,
    first bind and peak RSS on the StartUp rows (whose phase binds one pod, so no throughput).
    """
    header = [
        "workload", "runs", "scheduler_perf threshold", "thr avg ours / ref / ceiling", "thr ours/ref",
        "thr ours/ceiling", "first bind s ours / ref", "first bind ours/ref", "peak RSS MB ours / ref",
        "peak RSS ours/ref", "phase s ours / ref",
    ]  # fmt: skip
    thr = ("measured", "throughput", "average")
    rss = ("memory", "scheduler_peak_rss_mb")
    # raw-bind-events (the ceiling of a scheduler that also posts kube-scheduler's Scheduled events)
    # gets its own column when it ran; the ceiling stays raw-bind.
    with_events = any(r.get("scheduler") == "raw-bind-events" for r in results)
    if with_events:
        header.insert(6, "thr ours/ceiling with events")
    rows = []
    for workload, by_repeat in _by_workload_and_repeat(results).items():
        medians = {key: _medians_of(by_repeat, key, *thr) for key in ("ours", "reference", "raw-bind")}
        threshold = next(
            (t for by in by_repeat.values() for r in by.values() if (t := _get(r, "params", "threshold"))),
            None,
        )
        row = [
            workload,
            str(len(by_repeat)),
            _fmt(threshold, 0),
            "-" if not any(medians.values()) else " / ".join(_fmt(v, 0) for v in medians.values()),
            _fmt(_median_ratio(by_repeat, "reference", thr), 2),
            _fmt(_median_ratio(by_repeat, "raw-bind", thr), 2),
            _pair(
                _medians_of(by_repeat, "ours", "startup_seconds"),
                _medians_of(by_repeat, "reference", "startup_seconds"),
                2,
            ),
            _fmt(_median_ratio(by_repeat, "reference", ("startup_seconds",)), 2),
            _pair(_medians_of(by_repeat, "ours", *rss), _medians_of(by_repeat, "reference", *rss), 0),
            _fmt(_median_ratio(by_repeat, "reference", rss), 2),
            _pair(
                _medians_of(by_repeat, "ours", "measured", "seconds"),
                _medians_of(by_repeat, "reference", "measured", "seconds"),
                1,
            ),
        ]
        if with_events:
            row.insert(6, _fmt(_median_ratio(by_repeat, "raw-bind-events", thr), 2))
        rows.append(row)
    return _markdown(header, rows)


def panel_grid(count: int, cols: int = 2) -> list[tuple[int, int, int]]:
    """(row, column, columns spanned) of each of ``count`` panels on a grid ``cols`` wide: the last
    panel spans what its row would leave empty, so the figure has exactly one panel per workload."""
    out = [(i // cols, i % cols, 1) for i in range(count)]
    if count and count % cols:
        row, col, _ = out[-1]
        out[-1] = (row, col, cols - col)
    return out


_STYLES = {
    "ours": ("tab:blue", "-"),
    "ours-unbatched": ("tab:cyan", "--"),
    "ours-baseline": ("tab:purple", "-."),
    "reference": ("tab:orange", "-"),
    "raw-bind": ("tab:gray", ":"),
    "raw-bind-events": ("tab:brown", ":"),
}


def _label_of(name: str, runs: int) -> str:
    label = {"raw-bind": "raw-bind (ceiling)", "raw-bind-events": "raw-bind + events (ceiling)"}.get(
        name, name
    )
    return f"{label} ({runs} runs)" if runs > 1 else label


def _throughput_panel(ax: Any, by_repeat: Mapping[Any, Mapping[str, Result]]) -> None:
    """Every repeat's 1-second windows, one colour per scheduler."""
    for name in SCHEDULERS:
        series = [w for by in by_repeat.values() if (w := _get(by.get(name, {}), *_WINDOWS))]
        color, style = _STYLES[name]
        for k, windows in enumerate(series):
            label = _label_of(name, len(series)) if k == 0 else None
            ax.plot(range(1, len(windows) + 1), windows, style, color=color, label=label, linewidth=1.2)
    ax.set_xlabel("seconds since first bind")
    ax.set_ylabel("pods/s")


def _startup_panel(ax: Any, by_repeat: Mapping[Any, Mapping[str, Result]]) -> None:
    """A start-up workload binds one pod: the median first bind per scheduler, its peak RSS above."""
    names = [n for n in SCHEDULERS if any(n in by for by in by_repeat.values())]
    seconds = [_medians_of(by_repeat, n, "startup_seconds") or 0.0 for n in names]
    bars = ax.bar(names, seconds, color=[_STYLES[n][0] for n in names])
    for bar, name in zip(bars, names, strict=True):
        rss = _medians_of(by_repeat, name, "memory", "scheduler_peak_rss_mb")
        if rss is not None:
            ax.annotate(f"{rss:.0f} MB", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)  # fmt: skip
    ax.set_ylabel("first bind s (median); peak RSS above")


_WINDOWS = ("measured", "throughput", "windows")


def figure(results: Sequence[Result]) -> Any:
    """The chart as a matplotlib Figure (None without matplotlib or without a run to show): one
    panel per workload that ran, throughput windows over time, or first bind for start-up runs."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    panels = {
        workload: by_repeat
        for workload, by_repeat in _by_workload_and_repeat(results).items()
        if any(
            len(_get(r, *_WINDOWS) or ()) > 1 or r.get("startup_seconds") is not None
            for by in by_repeat.values()
            for r in by.values()
        )
    }
    if not panels:
        return None
    cols = 2 if len(panels) > 1 else 1
    grid = panel_grid(len(panels), cols)
    rows = grid[-1][0] + 1
    fig = plt.figure(figsize=(12, 3.2 * rows))
    spec = fig.add_gridspec(rows, cols)
    for (workload, by_repeat), (row, col, span) in zip(panels.items(), grid, strict=True):
        ax = fig.add_subplot(spec[row, col : col + span])
        if any(len(_get(r, *_WINDOWS) or ()) > 1 for by in by_repeat.values() for r in by.values()):
            _throughput_panel(ax, by_repeat)
            ax.set_title(workload, fontsize=10)
        else:  # StartUp, or a phase shorter than two windows
            _startup_panel(ax, by_repeat)
            ax.set_title(f"{workload}: first bind", fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def chart(results: Sequence[Result], path: Path) -> Path | None:
    """Write :func:`figure` as a PNG; None when there is nothing to draw (or no matplotlib)."""
    fig = figure(results)
    if fig is None:
        return None
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _frame_key(frame: str) -> str:
    """``func (path/file.py:123)`` -> ``path/file.py:func``: lines of one function add up."""
    name, _, where = frame.rpartition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{path}:{name}" if name else frame


def profile_summary(folded: Path, top: int = 15) -> dict[str, list[tuple[str, float]]]:
    """Self and inclusive shares of samples per function from py-spy's folded (raw) stacks.

    py-spy samples only threads that are running (no ``--idle``), so a share is a share of the
    process's CPU time, not of wall time.
    """
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in folded.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_key(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for key in set(frames):
            incl[key] = incl.get(key, 0) + count
    if not total:
        return {"self": [], "inclusive": []}

    def ranked(d: dict[str, int]) -> list[tuple[str, float]]:
        return [(k, 100.0 * v / total) for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:top]]

    return {"self": ranked(own), "inclusive": ranked(incl), "samples": [("total", float(total))]}
