"""Metrics the engine records (the reference's ``pkg/scheduler/metrics``).

``recorder`` is the seam the engine codes against (no exporter); ``prometheus`` implements it
with prometheus-client for the operator. Only ``recorder`` is imported by the engine.
"""

from kopf_scheduler.metrics.recorder import MetricsRecorder, NoopMetrics, Tally

__all__ = ["MetricsRecorder", "NoopMetrics", "Tally"]
