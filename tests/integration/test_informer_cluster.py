"""The informer through a real 410 Gone: kube-apiserver compacting etcd every second, no watch cache.

Watches are served from etcd (``--watch-cache=false``), which sends no bookmarks, so a watch of a
quiet namespace keeps the resourceVersion of its last event while other namespaces' writes move
etcd's revision on; ``--etcd-compaction-interval=1s`` compacts that version away. When the watch
ends (its short ``timeoutSeconds``) and is made again from that version, etcd has no history left
for it and the apiserver answers with an ERROR event 410 "too old resource version", exactly as it
does in production after a quiet spell longer than the compaction interval (5 min by default).

While the informer backs off before its re-list, objects are deleted and created: no watch sees
those, only the re-list's diff against the store can. The store must end equal to a fresh list and
every deletion must have been delivered.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.client import MERGE
from kopf_scheduler.cluster.connection import from_kubeconfig
from kopf_scheduler.cluster.informer import Backoff, Informer, InformerHandlers, ResourceKind
from kopf_scheduler_workbench.controlplane import ControlPlane

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    """Its own etcd and kube-apiserver: compacting every second would expire the shared one's watches."""
    cp = ControlPlane(apiserver_args=["--watch-cache=false", "--etcd-compaction-interval=1s"])
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": name}}


async def until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.01)


async def test_a_real_410_relists_and_loses_nothing(plane: ControlPlane) -> None:
    tag = uuid.uuid4().hex[:6]
    watched, churn = f"watched-{tag}", f"churn-{tag}"
    api = ApiClient(from_kubeconfig(plane.kubeconfig))
    for ns in (watched, churn):
        await api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    path = f"/api/v1/namespaces/{watched}/configmaps"
    for i in range(5):
        await api.request("POST", path, body=configmap(f"a{i}"))
    await api.request("POST", f"/api/v1/namespaces/{churn}/configmaps", body=configmap("c"))

    added: list[str] = []
    deleted: list[str] = []
    informer: Informer[dict[str, Any]] = Informer(
        api,
        ResourceKind("ConfigMap", path),
        InformerHandlers(
            parse=dict,
            add=lambda o: added.append(o["metadata"]["name"]),
            update=lambda old, new: None,
            delete=lambda o: deleted.append(o["metadata"]["name"]),
        ),
        min_watch_timeout=2,  # the watch ends after 2-3 s and is made again from its version
        backoff=Backoff(initial=2.0),  # the gap between the 410 and the re-list: 2-4 s
    )
    task = asyncio.ensure_future(informer.run())
    churning = True

    async def churn_writes() -> None:
        """Writes elsewhere move etcd's revision on, past the quiet watch's version."""
        n = 0
        while churning:
            n += 1
            body = {"data": {"n": str(n)}}
            await api.request(
                "PATCH", f"/api/v1/namespaces/{churn}/configmaps/c", body=body, content_type=MERGE
            )
            await asyncio.sleep(0.05)

    writer = asyncio.ensure_future(churn_writes())
    try:
        await until(lambda: len(informer.store) == 5, 20, "the first listing")
        await api.request("POST", path, body=configmap("a5"))  # seen by the watch
        await until(lambda: f"{watched}/a5" in informer.store, 10, "a5 by the watch")
        assert informer.relists == 0

        started = time.monotonic()
        await until(lambda: informer.expired >= 1, 30, "a 410 from the apiserver")
        print(f"410 after {time.monotonic() - started:.1f}s of writes elsewhere")
        # The informer now waits for its backoff before listing again: what happens meanwhile no
        # watch sees.
        assert informer.relists == 0
        for name in ("a0", "a1"):
            await api.request("DELETE", f"{path}/{name}")
        await api.request("POST", path, body=configmap("a6"))
        assert informer.relists == 0, "the re-list came before the changes it was to find"
        churning = False
        await writer

        await until(lambda: informer.relists >= 1, 10, "the re-list")
        assert informer.missed_deletions == 2
        assert {"a0", "a1"} <= set(deleted) and "a6" in added
        # And the watch that followed the re-list works.
        await api.request("DELETE", f"{path}/a2")
        await api.request("POST", path, body=configmap("a7"))
        await until(lambda: f"{watched}/a7" in informer.store, 10, "a7 by the new watch")
        await until(lambda: f"{watched}/a2" not in informer.store, 10, "a2's deletion by the new watch")

        fresh = await api.request("GET", path)
        truth = {
            f"{watched}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in fresh["items"]
        }
        assert {key: rv for key, (rv, _) in informer.store.items()} == truth
        assert sorted(deleted) == ["a0", "a1", "a2"]
        assert sorted(added) == ["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"]
        assert not task.done()
    finally:
        churning = False
        task.cancel()
        writer.cancel()
        await asyncio.gather(task, writer, return_exceptions=True)
        await api.close()
