"""The with-events ceiling posts the Scheduled event in kube-scheduler's shape."""

from __future__ import annotations

from kopf_scheduler_workbench.bench.rawbind import scheduled_event


def test_scheduled_event_has_kube_schedulers_shape() -> None:
    event = scheduled_event("ns", "p-1", "uid-1", "node-7", "raw-bind-events")
    assert event["apiVersion"] == "events.k8s.io/v1" and event["kind"] == "Event"
    assert (event["reason"], event["action"], event["type"]) == ("Scheduled", "Binding", "Normal")
    assert event["note"] == "Successfully assigned ns/p-1 to node-7"
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ns",
        "name": "p-1",
        "uid": "uid-1",
    }
    meta = event["metadata"]
    assert isinstance(meta, dict) and meta["namespace"] == "ns" and str(meta["name"]).startswith("p-1.")
    assert str(event["eventTime"]).endswith("Z") and event["reportingController"] == "raw-bind-events"
