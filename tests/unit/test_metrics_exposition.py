"""The /metrics text, byte for byte: a fixed set of observations through every recorder method and
the edge's own metrics, scraped and compared with a golden text (``data/metrics_exposition.txt``,
written by the prometheus-client Counters and Gauges the recorder had before its own lean ones).

Names, HELP with ``[STABLE]``/``[BETA]``/``[ALPHA]``, TYPE, label order, bucket bounds, the
values' spelling and the families' order must not move: dashboards and alerts written for
kube-scheduler read them. Only the golden's families are compared (a metric added later is
appended to the golden when it is added: this test is about the ones that exist)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kopf_scheduler.metrics.prometheus import PrometheusMetrics

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "data" / "metrics_exposition.txt"

# What every recorder method records; the same source feeds the in-process and the served scrape.
RECORD = """
class _Always(random.Random):
    def random(self) -> float:
        return 0.0

def record(m):
    m.watch_pending_pods(lambda: {"active": 3, "backoff": 1, "unschedulable": 2, "gated": 0})
    m.sample_plugin_metrics()
    for result, seconds in (("scheduled", 0.004), ("scheduled", 0.02), ("unschedulable", 1.5)):
        m.schedule_attempt(result, "kopf-scheduler", seconds)
    m.schedule_attempt("error", "other", 100.0)
    m.scheduling_algorithm(0.0031)
    m.scheduling_algorithm(0.25)
    m.pod_scheduled(1, 0.5)
    m.pod_scheduled(3, 12.0)
    m.pod_scheduled(20, None)
    m.binding_goroutines(2)
    m.binding_goroutines(-1)
    m.extension_point("Filter", "Success", "kopf-scheduler", 0.00015)
    m.extension_point("Bind", "Error", "kopf-scheduler", 0.3)
    m.plugin_duration("NodeResourcesFit", "Filter", "Success", 0.00002, 40)
    m.plugin_duration("TaintToleration", "Score", "Success", 0.5)
    tally = m.plugin_evaluations("NodeResourcesFit", "Filter", "kopf-scheduler")
    tally.n += 40
    m.plugin_evaluations("TaintToleration", "Score", "kopf-scheduler").n += 1
    m.permit_wait("Success", 0.01)
    m.preemption_attempt()
    m.preemption_attempt()
    m.preemption_victims(3)
    m.workload_preemption_attempt("Success")
    m.workload_preemption_victims(5, 2)
    m.workload_preemption_victims(1, 0)
    m.queue_incoming("active", "PodAdd")
    m.queue_incoming("active", "PodAdd")
    m.queue_incoming("backoff", "NodeAdd")
    m.unschedulable_reason("NodeResourcesFit", "kopf-scheduler", 2)
    m.unschedulable_reason("NodeResourcesFit", "kopf-scheduler", -1)
    m.unschedulable_reason("TaintToleration", "kopf-scheduler", 1)
    m.pre_queueing_hint("DynamicResources", "narrowed")
    m.pod_group_attempt("scheduled", "kopf-scheduler", 0.05)
    m.pod_group_algorithm(0.002)
    m.batch_attempt("kopf-scheduler", "hint_used")
    m.batch_flushed("kopf-scheduler", "pod_added")
    m.batch_rescore("kopf-scheduler", 0.0001)
    m.node_hint_duration("true", "kopf-scheduler", 0.00003)
    m.store_results_duration("kopf-scheduler", 0.0005)
"""

# The process-wide metrics as the operator serves them: recorded, then scraped over HTTP.
SERVED = (
    "import random, urllib.request\n"
    + RECORD
    + """
from kopf_scheduler.cluster import metrics
record(metrics.SCHEDULER)
metrics.BIND_ERRORS.labels("conflict").inc()
metrics.BIND_ERRORS.labels("conflict").inc()
metrics.BIND_ERRORS.labels("api").inc()
metrics.LEADER.set_function(lambda: 1.0)
metrics.SYNC_SECONDS.set(0.125)
metrics.TASKS.set(17)
server = metrics.serve(metrics.Health(), "127.0.0.1", 0)
try:
    port = server.server_address[1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        print(resp.headers["Content-Type"])
        print(resp.read().decode(), end="")
finally:
    metrics.stop(server)
"""
)


def _families(text: str) -> dict[str, str]:
    """Each family's lines by name, in the text's order (a family starts at its HELP line)."""
    out: dict[str, str] = {}
    name = ""
    for line in text.splitlines(keepends=True):
        if line.startswith("# HELP "):
            name = line.split()[2]
            out[name] = ""
        out[name] += line
    return out


def _golden() -> dict[str, dict[str, str]]:
    parts = GOLDEN.read_text().split("\n=== served\n")
    return {"recorder": _families(parts[0].removeprefix("=== recorder\n")), "served": _families(parts[1])}


def _compared(scraped: str, golden: dict[str, str]) -> str:
    families = _families(scraped)
    return "".join(families[name] for name in families if name in golden)


def _recorder_scrape() -> str:
    namespace: dict[str, object] = {"random": random}
    exec(RECORD, namespace)
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, rng=namespace["_Always"](), plugin_buffer=10**9)  # type: ignore[operator]
    namespace["record"](metrics)  # type: ignore[operator]
    return generate_latest(registry).decode()


def test_the_recorders_exposition_is_the_golden_text() -> None:
    golden = _golden()["recorder"]
    scraped = _recorder_scrape()
    assert _compared(scraped, golden) == "".join(golden.values())
    # No ``*_created`` series, though this registry was never told so (prometheus-client's own
    # Counters wrote them unless ``disable_created_metrics`` was called in the process).
    assert not any(name.endswith("_created") for name in _families(scraped))


def test_the_served_exposition_is_the_golden_text() -> None:
    """The process-wide registry over HTTP (the default process and GC collectors left out: their
    values are the process's), with the engine's and the edge's metrics."""
    out = subprocess.run([sys.executable, "-c", SERVED], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    content_type, _, scraped = out.stdout.partition("\n")
    assert content_type == CONTENT_TYPE_LATEST
    golden = _golden()["served"]
    assert _compared(scraped, golden) == "".join(golden.values())
    families = list(_families(scraped))
    assert "scheduler_bind_errors_total" in families and not any(n.endswith("_created") for n in families)
