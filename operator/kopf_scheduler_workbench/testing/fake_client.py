"""The in-memory ``ClusterClient`` under the name unit tests use (it lives in ``memory_client``)."""

from kopf_scheduler.memory_client import MemoryClusterClient as FakeClusterClient
from kopf_scheduler.memory_client import RecordedEvent

__all__ = ["FakeClusterClient", "RecordedEvent"]
