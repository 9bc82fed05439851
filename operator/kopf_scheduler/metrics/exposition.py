"""The lean metrics (``prometheus.py``) as prometheus-client collectors, for its registries.

Imported only when the metrics are exposed (the operator's metrics server starts after the first
cycles; tests and benchmarks expose at once): it is what brings prometheus-client in. Each metric
is a collector of its own, registered in the recorder's order, so a scrape writes the families,
their HELP, TYPE, labels, buckets and values exactly as prometheus-client's own Counter, Gauge and
Histogram did, and no ``*_created`` series (kube-scheduler has none).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from kopf_scheduler.metrics.prometheus import Histogram, LeanMetric

__all__ = ["register"]


def register(registry: CollectorRegistry, metrics: Iterable[LeanMetric]) -> None:
    for metric in metrics:
        registry.register(_Collector(metric))


class _Collector(Collector):
    def __init__(self, metric: LeanMetric) -> None:
        self.metric = metric
        self._les: list[str] = []
        if isinstance(metric, Histogram):
            self._les = [floatToGoString(b) for b in metric.bounds] + ["+Inf"]

    def _family(self) -> Metric:
        m = self.metric
        if m.kind == "histogram":
            return HistogramMetricFamily(m.name, m.documentation, labels=m.label_names)
        if m.kind == "counter":
            return CounterMetricFamily(m.name, m.documentation, labels=m.label_names)
        return GaugeMetricFamily(m.name, m.documentation, labels=m.label_names)

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        metric = self.metric
        if isinstance(metric, Histogram):
            assert isinstance(family, HistogramMetricFamily)
            for key, counts, total in metric.series():
                cumulative = 0
                buckets = []
                for le, n in zip(self._les, counts, strict=True):
                    cumulative += n
                    buckets.append((le, float(cumulative)))
                family.add_metric(list(key), buckets, total)
        else:
            assert isinstance(family, CounterMetricFamily | GaugeMetricFamily)
            for key, value in metric.samples():
                family.add_metric(list(key), value)
        yield family
