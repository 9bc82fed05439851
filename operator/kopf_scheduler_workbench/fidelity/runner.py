"""``kopf-scheduler fidelity``: the reference kube-scheduler and ours decide the same pods, live.

One control plane serves the whole run; the reference (``default-scheduler``, its
``schedule_one`` at ``-v=10`` so it logs every node's final score) and ours (``kopf-scheduler``)
run side by side. For each scenario the runner creates the cluster, then for each pending pod:

1. keeps the bound pods of the scenario as the state ``simulate`` is fed;
2. creates the pod for ours and waits (watches, no polling) until it is bound, or until its
   FailedScheduling event and PodScheduled condition are there, plus any preemption victims;
   then deletes it and puts back what ours' preemption deleted (same names, same nodes);
3. creates the same pod for the reference and waits the same way; its outcome is the truth the
   state advances with: a bound pod stays, a failed one is deleted, a preemptor's victims are
   finished off (no kubelet runs to do it) and the preemptor is recreated bound to its
   nominated node, where the reference would bind it next;
4. runs ``simulate`` on the state of step 1 with the same pod.

A gang (``--features gang``: the plane serves PodGroups, both schedulers run with GenericWorkload
on) is one step of the same shape: its PodGroup and members are created for ours (group first or
last, members in the generated order), every member is waited for, all are deleted; then the same
for the reference, whose bound members stay; simulate gets all members at once.

The reference's best-score sets come from its log once it has stopped (klog flushes on exit).
Nothing ever needs a fixed wait except after setting a scenario up: nodes, volumes and PDBs
reach each scheduler's informers on separate watches, so a short settle time lets them land
before the first pod (pods themselves arrive in order on one watch, so later steps need none).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import functools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp

from kopf_scheduler.api import kinds
from kopf_scheduler.config import features
from kopf_scheduler.explain.reflog import parse_scores
from kopf_scheduler_workbench.bench.runner import ROOT, SCHEDULERS, scheduler_command
from kopf_scheduler_workbench.controlplane import ControlPlane, build, pinned_versions
from kopf_scheduler_workbench.fidelity.compare import (
    CATEGORIES,
    Decision,
    Outcome,
    Tally,
    judge,
    pair_gang_members,
    reason_diffs,
    signature,
)
from kopf_scheduler_workbench.fidelity.generator import LABEL, Features, Scenario, generate, run_objects
from kopf_scheduler_workbench.processes import die_with_parent, free_port, stop_group
from kopf_scheduler_workbench.rest import Api, collection, item_path, object_path

__all__ = ["FidelityRun", "add_arguments", "markdown", "run", "run_fidelity"]

Obj = dict[str, Any]
PLACED = "fidelity-placed"  # schedulerName of pods the runner binds itself (no scheduler owns it)

# What simulate's handle.objects holds, keyed as ``load_documents`` keys it; Services and
# ReplicaSets feed PodTopologySpread's system-default selector.
_SIM_KINDS = (
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "CSINode",
    "PodDisruptionBudget",
    "Namespace",
    "PriorityClass",
    "Service",
    "ReplicaSet",
    "DeviceClass",
    "ResourceSlice",
    "ResourceClaim",
)


def _scenario_prefix(body: Mapping[str, Any]) -> str:
    """``s7-k3-`` for a pod in namespace ``s7-k3-a``: what every object of its scenario starts with."""
    return str(body["metadata"]["namespace"]).rsplit("-", 1)[0] + "-"


def pod_key(obj: Mapping[str, Any]) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def _condition(pod: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def _differs(count: Callable[[], Sequence[str]], seen: int) -> bool:
    return len(count()) != seen


class Changed:
    """One wake-up for every watch: a waiter re-checks its predicate after any event."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def notify(self) -> None:
        self.event.set()

    async def until(self, check: Callable[[], Any], timeout: float) -> Any:
        """``check()``'s first truthy value, or None after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self.event.clear()
            value = check()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), left)


@dataclass
class Watches:
    """The run's pods (by label) and FailedScheduling events, kept current from two watches."""

    api: Api
    changed: Changed
    pods: dict[str, Obj] = field(default_factory=dict)
    terminating_since: dict[str, float] = field(default_factory=dict)
    deleted_at: dict[str, float] = field(default_factory=dict)  # gone without the runner deleting it
    runner_deletes: set[str] = field(default_factory=set)
    failed_notes: dict[str, list[str]] = field(default_factory=dict)  # pod uid -> notes, in order
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        ready = [asyncio.Event(), asyncio.Event()]
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._loop(kinds.POD, {"labelSelector": f"{LABEL}=1"}, self._pod, ready[0])),
            loop.create_task(
                self._loop(
                    kinds.EVENT,
                    {"fieldSelector": "reason=FailedScheduling"},
                    self._event,
                    ready[1],
                )
            ),
        ]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 60)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _loop(
        self,
        kind: kinds.Kind[Any],
        params: dict[str, str],
        handle: Callable[[str, Obj], None],
        ready: asyncio.Event,
    ) -> None:
        while True:  # re-list and re-watch whenever the stream ends (timeout, 410 Gone)
            listing = await self.api.listing(kind, **params)
            for item in listing.get("items") or []:
                handle("ADDED", item)
            rv = str(listing["metadata"]["resourceVersion"])
            ready.set()
            self.changed.notify()
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async for event in self.api.watch_lines(
                    kind.path, {**params, "resourceVersion": rv, "allowWatchBookmarks": "1"}, 290.0
                ):
                    event_type = str(event.get("type"))
                    if event_type == "ERROR":
                        break
                    if event_type != "BOOKMARK":
                        handle(event_type, event["object"])
                        self.changed.notify()

    def _pod(self, kind: str, obj: Obj) -> None:
        key = pod_key(obj)
        if kind == "DELETED":
            self.pods.pop(key, None)
            if key in self.runner_deletes:
                self.runner_deletes.discard(key)
                self.terminating_since.pop(key, None)
            else:  # a victim deleted at once (grace period 0): it never showed as terminating
                self.deleted_at[key] = self.terminating_since.pop(key, time.monotonic())
            return
        self.deleted_at.pop(key, None)
        self.pods[key] = obj
        if obj["metadata"].get("deletionTimestamp") and key not in self.terminating_since:
            self.terminating_since[key] = time.monotonic()

    def _event(self, kind: str, obj: Obj) -> None:
        uid = str((obj.get("regarding") or {}).get("uid") or "")
        note = str(obj.get("note") or obj.get("message") or "")
        if kind == "ADDED" and uid:
            self.failed_notes.setdefault(uid, []).append(note)


@dataclass
class FidelityRun:
    """Options of one run (seeds x scenarios) and where its results go."""

    seeds: list[int]
    scenarios: int = 10
    only_scenario: int | None = None
    features: Features = field(default_factory=Features)
    out: Path = Path("fidelity-report.json")
    logs: Path | None = None
    live: bool = True
    # A gang short of minCount is never tried: nothing tells when a scheduler has decided to hold
    # it, so its members are looked at after this long.
    hold: float = 1.5
    simulated: bool = True
    settle: float = 0.6
    decision_timeout: float = 30.0
    quiet: float = 0.6  # no new victim for this long ends a preemption's wait
    kcp: Path | None = None
    # Both schedulers started with this KubeSchedulerConfiguration (one of its profiles, by name, or
    # the first): the reference serving it as default-scheduler, ours as kopf-scheduler.
    config: Path | None = None
    config_profile: str | None = None
    log: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr, flush=True))

    def indices(self) -> list[int]:
        return [self.only_scenario] if self.only_scenario is not None else list(range(self.scenarios))


class Driver:
    """Drives one control plane with both schedulers through the scenarios."""

    def __init__(self, plane: ControlPlane, opts: FidelityRun) -> None:
        self.plane = plane
        self.opts = opts
        self.api = Api(plane.server, plane.admin_token, concurrency=16)
        self.changed = Changed()
        self.watches = Watches(self.api, self.changed)
        self.bodies: dict[str, Obj] = {}  # pod key -> how to recreate it as it is now
        self.decisions: list[Decision] = []
        self.sim_state: dict[str, Any] = {}
        self.rejected: list[str] = []
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.started = 0
        self.pending: list[Obj] = []
        self.sim_profiles: list[Any] = []  # simulate's profiles (a --config run's, else the default)
        # simulate runs under the gates both live schedulers run with
        self.sim_gates = features.FeatureGates.parse(plane.feature_gates() or None)

    # -- API helpers --

    async def create(self, obj: Obj) -> Obj:
        created = await self.api.request("POST", collection(obj), obj)
        status = obj.get("status")
        if status and obj["kind"] in (
            "Pod",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "PodDisruptionBudget",
        ):
            created = await self.patch(f"{item_path(obj)}/status", {"status": status})
        return created

    async def patch(self, path: str, body: Mapping[str, Any]) -> Obj:
        return await self.api.patch(path, body)

    async def delete(self, path: str, *, force: bool = True) -> None:
        """Delete (gone already is fine); ``force``: at once, as no kubelet runs to finish it."""
        await self.api.delete(path, grace_period=0 if force else None)

    async def delete_pod(self, key: str) -> None:
        """Force-delete (the kubelet's part: no kubelet runs) and wait until the watch shows it gone."""
        ns, name = key.split("/", 1)
        if key in self.watches.pods:
            self.watches.runner_deletes.add(key)
        await self.delete(object_path(kinds.POD, name, ns))
        await self.changed.until(lambda: key not in self.watches.pods, 30)

    async def create_pod(self, body: Obj) -> Obj:
        created = await self.create(body)
        key = pod_key(body)
        await self.changed.until(lambda: self._has_status(key, body.get("status") or {}), 30)
        return created

    def _has_status(self, key: str, status: Mapping[str, Any]) -> bool:
        """The watch shows the pod, with the status the runner wrote (a separate write) if any."""
        obj = self.watches.pods.get(key)
        return obj is not None and all((obj.get("status") or {}).get(k) == v for k, v in status.items())

    def _kubelet_status(self) -> Obj:
        """Running since a distinct instant, later than any generated pod's: a kubelet's report."""
        self.started += 1
        start = datetime.datetime(2026, 2, 1, tzinfo=datetime.UTC) + datetime.timedelta(minutes=self.started)
        return {"phase": "Running", "startTime": start.strftime("%Y-%m-%dT%H:%M:%SZ")}

    # -- the run --

    async def start(self) -> None:
        await self.watches.start()
        for obj in run_objects():
            await self.create(obj)

    async def warm_up(self, scheduler_names: Sequence[str], timeout: float) -> None:
        """A node and one pod per scheduler: returns once both bind, then removes them."""
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "fid-warmup", "labels": {LABEL: "1"}},
            "status": {
                "allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"},
                "capacity": {"cpu": "1", "memory": "1Gi", "pods": "10"},
            },
        }
        await self.create(node)
        keys = []
        for name in scheduler_names:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"warmup-{name}", "namespace": "default", "labels": {LABEL: "1"}},
                "spec": {
                    "schedulerName": name,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.example.com/tiny:1"}],
                },
            }
            await self.create(pod)
            keys.append(pod_key(pod))
        bound = await self.changed.until(
            lambda: all((self.watches.pods.get(k) or {}).get("spec", {}).get("nodeName") for k in keys),
            timeout,
        )
        if not bound:
            raise RuntimeError(f"schedulers not ready after {timeout}s: warm-up pods not bound")
        for key in keys:
            await self.delete_pod(key)
        await self.delete(object_path(kinds.NODE, "fid-warmup"), force=False)

    async def setup(self, sc: Scenario) -> None:
        for obj in sc.namespaces:
            await self.create(obj)
        uids: dict[str, str] = {}
        for obj in sc.cluster_objects + sc.namespaced_objects:
            created = await self.create(obj)
            uids[f"{obj['kind']}/{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"] = str(
                created.get("metadata", {}).get("uid", "")
            )
        await self.api.create_all(collection, sc.nodes)
        self.bodies = {}
        pods = [self._owned(p, uids) for p in sc.running]
        accepted = await asyncio.gather(*(self._create_or_skip(p) for p in pods))
        for body, ok in zip(pods, accepted, strict=True):
            if ok:
                self.bodies[pod_key(body)] = body
        self.pending = [self._owned(p, uids) for p in sc.pending]
        await self.changed.until(
            lambda: all(self._has_status(k, b.get("status") or {}) for k, b in self.bodies.items()), 30
        )
        # Nodes, volumes and PDBs reach the schedulers on other watches; a few hundred nodes take longer.
        await asyncio.sleep(self.opts.settle + 0.005 * len(sc.nodes))
        if self.opts.simulated:
            self.sim_state = await self._objects_for_simulate(sc)

    async def _create_or_skip(self, body: Obj) -> bool:
        """A generated object the apiserver rejects is a generator bug: reported, not fatal."""
        try:
            await self.create(body)
        except RuntimeError as exc:
            self.rejected.append(str(exc)[:500])
            self.opts.log(f"[fidelity] rejected: {str(exc)[:300]}")
            return False
        return True

    @staticmethod
    def _owned(body: Obj, uids: Mapping[str, str]) -> Obj:
        refs = body["metadata"].get("ownerReferences")
        if not refs:
            return body
        ns = body["metadata"]["namespace"]
        fixed = [{**r, "uid": uids.get(f"{r['kind']}/{ns}/{r['name']}", "") or "missing"} for r in refs]
        return {**body, "metadata": {**body["metadata"], "ownerReferences": fixed}}

    async def teardown(self, sc: Scenario) -> None:
        for ns in (n["metadata"]["name"] for n in sc.namespaces):
            await self.delete(f"{kinds.POD.collection(ns)}?{urlencode({'labelSelector': f'{LABEL}=1'})}")
            if sc.gangs:
                selector = urlencode({"labelSelector": f"{LABEL}=1"})
                await self.delete(f"{kinds.POD_GROUP.collection(ns)}?{selector}", force=False)
        await self.changed.until(
            lambda: not any(k.startswith(f"{sc.prefix}-") for k in self.watches.pods), 30
        )
        self.watches.deleted_at.clear()
        self.watches.terminating_since.clear()
        self.watches.runner_deletes.clear()
        for obj in sc.cluster_objects + sc.namespaced_objects:
            if obj["kind"] in (
                "PersistentVolume",
                "PersistentVolumeClaim",
                "ResourceClaim",
            ):  # protection finalizers
                with contextlib.suppress(RuntimeError):
                    await self.patch(item_path(obj), {"metadata": {"finalizers": None}})
            await self.delete(item_path(obj), force=False)
        for node in sc.nodes:
            await self.delete(item_path(node), force=False)

    async def _objects_for_simulate(self, sc: Scenario) -> dict[str, Any]:
        nodes = await self.api.listing(kinds.NODE, labelSelector=f"{LABEL}=1")
        objects: dict[str, dict[str, Any]] = {}
        for kind in (*_SIM_KINDS, *(("PodGroup",) if self.plane.workloads else ())):
            registered = kinds.by_name(kind)
            for item in await self.api.list_all(registered):
                meta = item["metadata"]
                if meta.get("deletionTimestamp"):
                    continue
                item = {"kind": kind, **item}
                key = registered.key(meta)
                objects.setdefault(kind, {})[key] = registered.parse(item)  # the view, as the informers
        return {"nodes": list(nodes.get("items") or []), "objects": objects}

    async def decide(self, body: Obj, *, mark: float) -> tuple[Outcome, Obj]:
        """Create ``body``; wait for its scheduler to bind it, or to fail it (and preempt)."""
        try:
            created = await self.create(body)
        except RuntimeError as exc:
            self.rejected.append(str(exc)[:500])
            return Outcome(error=f"create: {exc}"), {}
        key, uid = pod_key(body), str(created["metadata"]["uid"])
        w = self.watches

        def settled() -> str | None:
            obj = w.pods.get(key)
            if obj is None:
                return None
            if (obj.get("spec") or {}).get("nodeName"):
                return "bound"
            cond = _condition(obj, "PodScheduled")
            if cond and cond.get("status") == "False" and w.failed_notes.get(uid):
                return "failed"
            return None

        state = await self.changed.until(settled, self.opts.decision_timeout)
        obj = w.pods.get(key) or {}
        if state is None:
            cond = _condition(obj, "PodScheduled") or {}
            notes = w.failed_notes.get(uid) or []
            return Outcome(
                error=f"timeout: no bind or FailedScheduling+condition within {self.opts.decision_timeout}s",
                message=notes[0] if notes else "",
                reason=str(cond.get("reason") or ""),
                condition_message=str(cond.get("message") or ""),
            ), created
        if state == "bound":
            return Outcome(node=str(obj["spec"]["nodeName"])), created
        nominated = str((obj.get("status") or {}).get("nominatedNodeName") or "")
        # The condition of the first failure, as the event is the first one: a retry that rewrites
        # it depends on each scheduler's backoff timing, not on what the attempt decided.
        cond = _condition(obj, "PodScheduled") or {}

        def victims() -> list[str]:
            gone = (*w.terminating_since.items(), *w.deleted_at.items())
            return sorted({k for k, t in gone if t >= mark and k != key})

        if nominated:  # victims are deleted around the nomination: wait until none is new for a while
            seen, since = len(victims()), time.monotonic()
            deadline = since + 10
            while time.monotonic() - since < self.opts.quiet and time.monotonic() < deadline:
                await self.changed.until(functools.partial(_differs, victims, seen), self.opts.quiet)
                if len(victims()) != seen:
                    seen, since = len(victims()), time.monotonic()
            obj = w.pods.get(key) or obj
            nominated = str((obj.get("status") or {}).get("nominatedNodeName") or "") or nominated
        return Outcome(
            message=w.failed_notes[uid][0],
            reason=str(cond.get("reason") or ""),
            condition_message=str(cond.get("message") or ""),
            nominated=nominated,
            victims=victims(),
        ), created

    async def restore(self, victims: Sequence[str]) -> None:
        """Undo ours' preemption: the victims come back as they were (same names and nodes)."""
        for key in victims:
            await self.delete_pod(key)
        for key in victims:
            if key in self.bodies:
                await self.create_pod(self.bodies[key])

    def _copy(self, body: Obj, name: str, scheduler: str) -> Obj:
        meta = {**body["metadata"], "name": name}
        return {**body, "metadata": meta, "spec": {**body["spec"], "schedulerName": scheduler}}

    async def scenario(self, seed: int, index: int) -> None:
        dead = {k: p.returncode for k, p in self.procs.items() if p.poll() is not None}
        if dead:  # every later decision would only time out
            raise RuntimeError(f"scheduler process exited: {dead}")
        sc = generate(seed, index, self.opts.features)
        self.opts.log(
            f"[fidelity] seed {seed} scenario {index}: {len(sc.nodes)} nodes, {len(sc.running)} running, "
            f"{len(sc.pending)} pending"
        )
        await self.setup(sc)
        try:
            for at in range(len(self.pending) + 1):
                for gang in sc.gangs:
                    if gang["at"] == at:
                        await self.gang(seed, sc, gang)
                if at < len(self.pending):
                    await self.one(seed, sc, self.pending[at])
        finally:
            await self.teardown(sc)

    async def one(self, seed: int, sc: Scenario, body: Obj) -> None:
        key = pod_key(body)
        bound_now = [
            p
            for k, p in self.watches.pods.items()
            if k.startswith(f"{sc.prefix}-") and (p.get("spec") or {}).get("nodeName")
        ]
        ours: Outcome | None = None
        ours_obj: Obj = {}
        claims = await self._claims_of(body)  # as they are before either scheduler decides
        if self.opts.live:
            mark = time.monotonic()
            ours_body = self._copy(body, f"{body['metadata']['name']}-o", "kopf-scheduler")
            ours, ours_obj = await self.decide(ours_body, mark=mark)
            await self.delete_pod(pod_key(ours_body))
            await self.restore(ours.victims)
            if claims:
                await self._restore_claims(claims, _scenario_prefix(body))
        mark = time.monotonic()
        ref_body = self._copy(body, body["metadata"]["name"], "default-scheduler")
        ref, ref_obj = await self.decide(ref_body, mark=mark)
        if ref.node:
            await self._keep_bound(key, ref_body, ref.node)
        else:
            await self.delete_pod(key)
            if ref.nominated and not ref.error:
                for victim in ref.victims:
                    await self.delete_pod(victim)
                    self.bodies.pop(victim, None)
                placed = {
                    **ref_body,
                    "spec": {**ref_body["spec"], "nodeName": ref.nominated, "schedulerName": PLACED},
                    "status": self._kubelet_status(),
                }
                await self.create_pod(placed)
                self.bodies[key] = placed
        simulated: Outcome | None = None
        if self.opts.simulated:
            template = ours_obj or ref_obj
            if template:
                simulated = await self.simulate(
                    bound_now, self._copy(template, body["metadata"]["name"] + "-s", "kopf-scheduler"), claims
                )
        self.decisions.append(Decision(seed, sc.index, key, len(sc.nodes), ref, [], ours, simulated))

    def _member_copy(self, body: Obj, suffix: str, scheduler: str) -> Obj:
        copy = self._copy(body, body["metadata"]["name"] + suffix, scheduler)
        group = copy["spec"]["schedulingGroup"]["podGroupName"] + suffix
        return {**copy, "spec": {**copy["spec"], "schedulingGroup": {"podGroupName": group}}}

    async def decide_gang(
        self, group: Obj, members: Sequence[Obj], *, group_first: bool, held: bool
    ) -> tuple[list[Outcome], list[Obj]]:
        """Create a PodGroup and its members (the group first or last); wait until every member is
        bound or has failed (FailedScheduling and PodScheduled=False), or, for a group short of
        minCount (``held``), ``hold`` seconds: its members stay pending without an attempt."""
        w = self.watches
        created: list[Obj] = []
        try:
            # PodGroups and pods reach a scheduler on separate watches: without the settle time the
            # group may land before some members already created (or after some created later),
            # and a cycle starts with the members that landed (seen in the reference: one member
            # of five, turned away, DynamicResources' PodGroupPostFilter erring on it).
            if group_first:
                await self.create(group)
                await asyncio.sleep(self.opts.settle)
            for body in members:
                created.append(await self.create(body))
            if not group_first:
                await asyncio.sleep(self.opts.settle)
                await self.create(group)
        except RuntimeError as exc:
            self.rejected.append(str(exc)[:500])
            return [Outcome(error=f"create: {exc}") for _ in members], created
        keys = [pod_key(b) for b in members]
        uids = [str(c["metadata"]["uid"]) for c in created]

        def settled(key: str, uid: str) -> bool:
            obj = w.pods.get(key)
            if obj is None:
                return False
            if (obj.get("spec") or {}).get("nodeName"):
                return True
            cond = _condition(obj, "PodScheduled")
            return bool(cond and cond.get("status") == "False" and w.failed_notes.get(uid))

        timeout = self.opts.hold if held else self.opts.decision_timeout
        done = await self.changed.until(
            lambda: all(settled(k, u) for k, u in zip(keys, uids, strict=True)), timeout
        )
        out = []
        for key, uid in zip(keys, uids, strict=True):
            obj = w.pods.get(key) or {}
            cond = _condition(obj, "PodScheduled") or {}
            notes = w.failed_notes.get(uid) or []
            node = str((obj.get("spec") or {}).get("nodeName") or "")
            error = ""
            if not done and not held and not settled(key, uid):
                error = f"timeout: no bind or FailedScheduling+condition within {timeout}s"
            out.append(
                Outcome(node=node, error=error, pod=key)
                if node
                else Outcome(
                    message=notes[0] if notes else "",
                    reason=str(cond.get("reason") or ""),
                    condition_message=str(cond.get("message") or ""),
                    nominated=str((obj.get("status") or {}).get("nominatedNodeName") or ""),
                    error=error,
                    pod=key,
                )
            )
        return out, created

    async def gang(self, seed: int, sc: Scenario, gang: Obj) -> None:
        """One gang, decided by ours, then by the reference (the state advances with its outcome),
        then by simulate: one Decision a member, tied together by the group's key."""
        group, members = gang["group"], gang["members"]
        min_count = int(group["spec"]["schedulingPolicy"]["gang"]["minCount"])
        held = min_count > len(members)
        group_key = pod_key(group)
        bound_now = [
            p
            for k, p in self.watches.pods.items()
            if k.startswith(f"{sc.prefix}-") and (p.get("spec") or {}).get("nodeName")
        ]
        ours: list[Outcome | None] = [None] * len(members)
        ours_objs: list[Obj] = []
        if self.opts.live:
            ours_group = {
                **group,
                "metadata": {**group["metadata"], "name": group["metadata"]["name"] + "-o"},
            }
            ours_members = [self._member_copy(b, "-o", "kopf-scheduler") for b in members]
            got, ours_objs = await self.decide_gang(
                ours_group, ours_members, group_first=gang["group_first"], held=held
            )
            ours = list(got)
            for body in ours_members:
                await self.delete_pod(pod_key(body))
            await self.delete(item_path(ours_group), force=False)
        ref_members = [self._copy(b, b["metadata"]["name"], "default-scheduler") for b in members]
        refs, ref_objs = await self.decide_gang(
            group, ref_members, group_first=gang["group_first"], held=held
        )
        for body, ref in zip(ref_members, refs, strict=True):
            key = pod_key(body)
            if ref.node:
                await self._keep_bound(key, body, ref.node)
            else:
                await self.delete_pod(key)
        if not any(r.node for r in refs):
            await self.delete(item_path(group), force=False)
        simulated: list[Outcome | None] = [None] * len(members)
        if self.opts.simulated:
            templates = ours_objs or ref_objs
            if len(templates) == len(members):
                pods = [
                    self._copy(t, t["metadata"]["name"].removesuffix("-o") + "-s", "kopf-scheduler")
                    for t in templates
                ]
                for p in pods:  # the reference's group: the one simulate is given
                    p["spec"] = {**p["spec"], "schedulingGroup": {"podGroupName": group["metadata"]["name"]}}
                simulated = list(await self.simulate_gang(bound_now, group, pods))
        for body, ref, o, sim in zip(ref_members, refs, ours, simulated, strict=True):
            self.decisions.append(
                Decision(seed, sc.index, pod_key(body), len(sc.nodes), ref, [], o, sim, gang=group_key)
            )

    async def _keep_bound(self, key: str, body: Obj, node: str) -> None:
        """A pod the reference bound stays, as the next pods' running state: recorded as placed on
        ``node`` and given the status a kubelet would report (written, then seen by the watch)."""
        status = self._kubelet_status()
        self.bodies[key] = {
            **body,
            "spec": {**body["spec"], "nodeName": node, "schedulerName": PLACED},
            "status": status,
        }
        ns, name = key.split("/", 1)
        await self.patch(object_path(kinds.POD, name, ns, "status"), {"status": status})
        await self.changed.until(functools.partial(self._has_status, key, status), 30)

    async def _claims_of(self, body: Obj) -> dict[str, Obj]:
        """Every ResourceClaim of the scenario (both namespaces: they all hold devices; those the
        reference made for its pods' extended resources too), when the pod may use one."""
        spec = body.get("spec") or {}
        extended = any(
            "dra.example.com/" in str(name)
            for c in spec.get("containers") or ()
            for name in ((c.get("resources") or {}).get("requests") or {})
        )
        if not spec.get("resourceClaims") and not extended:
            return {}
        return await self._scenario_claims(_scenario_prefix(body))

    async def _scenario_claims(self, prefix: str) -> dict[str, Obj]:
        return {
            f"{c['metadata']['namespace']}/{c['metadata']['name']}": {"kind": "ResourceClaim", **c}
            for c in await self.api.list_all(kinds.RESOURCE_CLAIM)
            if c["metadata"]["namespace"].startswith(prefix)
        }

    async def _restore_claims(self, claims: Mapping[str, Obj], prefix: str) -> None:
        """Undo ours' allocations and reservations, and delete the claims ours made for extended
        resources (the resourceclaim controller's and the garbage collector's parts: ours' pod is
        deleted), so the reference decides on the claims as ours found them."""
        changed = False
        for key in await self._scenario_claims(prefix):
            if key in claims:
                continue
            ns, name = key.split("/", 1)
            path = object_path(kinds.RESOURCE_CLAIM, name, ns)
            with contextlib.suppress(RuntimeError):
                await self.patch(path, {"metadata": {"finalizers": None}})
            await self.delete(path, force=False)
            changed = True
        for key, before in claims.items():
            ns, name = key.split("/", 1)
            path = object_path(kinds.RESOURCE_CLAIM, name, ns)
            now = await self.api.request("GET", path)
            if (now.get("status") or {}) == (before.get("status") or {}) and now["metadata"].get(
                "finalizers"
            ) == before["metadata"].get("finalizers"):
                continue
            changed = True
            now["metadata"]["finalizers"] = before["metadata"].get("finalizers")
            now = await self.api.request("PUT", path, now)
            now["status"] = before.get("status") or {}
            await self.api.request("PUT", f"{path}/status", now)
        if changed:  # the reference's informer must see the claims as they were
            await asyncio.sleep(self.opts.settle)

    async def simulate(
        self, bound: Sequence[Obj], pod: Obj, claims: Mapping[str, Obj] | None = None
    ) -> Outcome:
        from kopf_scheduler.api.objects import parse_node, parse_pod
        from kopf_scheduler.api.types import ObjectError
        from kopf_scheduler.simulate import Inputs, simulate

        meta = {k: v for k, v in pod["metadata"].items() if k not in ("uid", "resourceVersion")}
        meta["uid"] = f"sim-{meta['name']}"
        pending = {**pod, "metadata": meta, "status": {}}
        try:
            inputs = Inputs(
                nodes=[parse_node(n) for n in self.sim_state["nodes"]],
                running=[parse_pod(p) for p in bound],
                pending=[parse_pod(pending)],
                objects={k: dict(v) for k, v in self.sim_state["objects"].items()},
                profiles=list(self.sim_profiles),
            )
            if claims:  # as they were before this decision (the setup-time listing is older)
                parse = kinds.RESOURCE_CLAIM.parse
                inputs.objects["ResourceClaim"] = {k: parse(v) for k, v in claims.items()}
            with _scores_of(str(meta["name"])) as scores, features.using(self.sim_gates):
                (result,) = await simulate(inputs, seed=0)
        except (ObjectError, ValueError) as exc:
            return Outcome(error=f"simulate: {exc}")
        return _simulated_outcome(result, scores)

    async def simulate_gang(self, bound: Sequence[Obj], group: Obj, pods: Sequence[Obj]) -> list[Outcome]:
        """simulate with a gang's members pending at once and its PodGroup (as created, the only
        one it needs: the others' members are bound), under the live schedulers' gates."""
        from kopf_scheduler.api.objects import parse_node, parse_pod
        from kopf_scheduler.api.types import ObjectError
        from kopf_scheduler.simulate import Inputs, simulate

        pending = []
        for pod in pods:
            meta = {k: v for k, v in pod["metadata"].items() if k not in ("uid", "resourceVersion")}
            meta["uid"] = f"sim-{meta['name']}"
            pending.append({**pod, "metadata": meta, "status": {}})
        group_obj = {**group, "metadata": {**group["metadata"], "uid": f"sim-{group['metadata']['name']}"}}
        try:
            objects = {k: dict(v) for k, v in self.sim_state["objects"].items()}
            objects.setdefault("PodGroup", {})[kinds.POD_GROUP.key(group_obj["metadata"])] = (
                kinds.POD_GROUP.parse(group_obj)
            )
            inputs = Inputs(
                nodes=[parse_node(n) for n in self.sim_state["nodes"]],
                running=[parse_pod(p) for p in bound],
                pending=[parse_pod(p) for p in pending],
                objects=objects,
                profiles=list(self.sim_profiles),
            )
            with features.using(self.sim_gates):
                results = await simulate(inputs, seed=0)
        except (ObjectError, ValueError) as exc:
            return [Outcome(error=f"simulate: {exc}") for _ in pods]
        return [dataclasses.replace(_simulated_outcome(r), pod=f"{r.namespace}/{r.name}") for r in results]


def _simulated_outcome(result: Any, scores: dict[str, dict[str, int]] | None = None) -> Outcome:
    """simulate's PodOutcome as the runner records a live one."""
    failures = result.failures
    if result.victims or not result.node:
        held = not failures and result.message.startswith("not attempted: GangScheduling: ")
        return Outcome(
            # A pod never tried (a gang short of minCount) has no event live: nothing to say.
            message=failures[0] if failures else ("" if held else result.message),
            reason="Unschedulable" if failures else "",
            condition_message=failures[0] if failures else "",
            nominated=result.nominated_node or (result.node if result.victims else ""),
            # The first preempting attempt's victims: the reference is observed until its first
            # preemption settles (a retry after the victims are gone may preempt more).
            victims=sorted(result.victims_by_attempt[0] if result.victims_by_attempt else ()),
        )
    return Outcome(node=result.node, scores=scores or {})


@contextlib.contextmanager
def _scores_of(pod_name: str) -> Iterator[dict[str, dict[str, int]]]:
    """Our engine's weighted per-plugin and final scores for one pod, node by node.

    A diagnostic beside the reference's logged ones: the Framework's score pass is wrapped for
    the duration of one simulate call (single-threaded; the class is restored afterwards).
    """
    from kopf_scheduler.framework.runtime import Framework

    captured: dict[str, dict[str, int]] = {}
    original = Framework.run_score_plugins

    def spy(fw: Framework, state: Any, pod: Any, rows: Any, nodes: Any, raw: Any = None) -> Any:
        total, per_plugin = original(fw, state, pod, rows, nodes, raw)
        if pod.name == pod_name:
            captured.clear()  # the last scoring pass is the one that placed it
            for j, info in enumerate(nodes):
                name = info.node.name if info.node is not None else str(j)
                row = {p: int(v[j]) * int(fw.score_weights[p]) for p, v in per_plugin.items()}
                captured[name] = {**row, "final": int(total[j])}
        return total, per_plugin

    Framework.run_score_plugins = spy  # type: ignore[method-assign,assignment]
    try:
        yield captured
    finally:
        Framework.run_score_plugins = original  # type: ignore[method-assign]


def _judge_all(decisions: Sequence[Decision], log_path: Path) -> Tally:
    with log_path.open(errors="replace") as log:  # no log, no best-score sets: fail, do not guess
        scores = parse_scores(log)
    for d in decisions:
        d.best = sorted(scores.best(d.pod))
        # The reference's view of the nodes in question, per plugin.
        asked = {*d.best, *(o.node for o in (d.ours, d.simulated) if o is not None and o.node)}
        nodes = scores.pods.get(d.pod, {})
        d.scores = {
            n: {**nodes[n].plugins, "final": total}
            for n in sorted(asked)
            if n in nodes and (total := nodes[n].total) is not None
        }
        if not d.best and d.reference.node:
            d.best = [d.reference.node]  # one feasible node: nothing was scored
    pair_gang_members(decisions)
    tally = Tally()
    for d in decisions:
        for mode, other in (("live", d.ours), ("simulate", d.simulated)):
            if other is None:
                continue
            d.verdicts[mode] = judge(d.reference, other, d.best, d.nodes, live=mode == "live")
            tally.add(mode, d.verdicts[mode])
    return tally


def _git_commit() -> str:
    with contextlib.suppress(Exception):
        return subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    return ""


def _replay(opts: FidelityRun, seed: int, scenario: int) -> str:
    config = f" --config {opts.config}" if opts.config else ""
    if opts.config and opts.config_profile:
        config += f" --config-profile {opts.config_profile}"
    if opts.features != Features():  # the scenario is drawn from the same families
        config += " --features " + " ".join(k for k, v in vars(opts.features).items() if v)
    return f"kopf-scheduler fidelity{config} --seed {seed} --scenario {scenario}"


def config_files(opts: FidelityRun, plane: ControlPlane, workdir: Path) -> tuple[Path, Path, list[Any]]:
    """The reference's and ours' copies of ``opts.config``: the profile under test renamed to each
    side's schedulerName, the plane's kubeconfig, no leader election, scheduler_perf's client rate
    for both; and ours' profile as simulate takes it."""
    import yaml

    from kopf_scheduler.config import kubescheduler as ks
    from kopf_scheduler.framework.profiles import profiles_from_config

    assert opts.config is not None
    data = ks.read_yaml(opts.config.read_text())
    ks.load_document(data)  # refused here, in the reference's words, before anything starts
    profiles = list(data.get("profiles") or [{}])
    wanted = opts.config_profile
    chosen = next((p for p in profiles if p.get("schedulerName") == wanted), None) if wanted else profiles[0]
    if chosen is None:
        raise ValueError(f"{opts.config}: no profile {wanted!r}")
    out = []
    for name, scheduler in (("reference", "default-scheduler"), ("ours", "kopf-scheduler")):
        doc = {
            **data,
            "clientConnection": {"kubeconfig": str(plane.kubeconfig), "qps": 1000, "burst": 1000},
            "leaderElection": {"leaderElect": False},
            "profiles": [{**chosen, "schedulerName": scheduler}],
        }
        path = workdir / f"{name}-config.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(path)
    ours_profiles = profiles_from_config(ks.load(out[1].read_text()))
    return out[0], out[1], ours_profiles


def report(
    opts: FidelityRun,
    decisions: Sequence[Decision],
    tally: Tally,
    seconds: float,
    rejected: Sequence[str] = (),
) -> dict[str, Any]:
    """The JSON report: rates per mode and category, every disagreement with its replay command."""
    disagreements: list[dict[str, Any]] = []
    groups: dict[str, dict[str, Any]] = {}
    reasons: dict[str, dict[str, Any]] = {}
    for d in decisions:
        for mode, verdicts in d.verdicts.items():
            other = d.ours if mode == "live" else d.simulated
            assert other is not None
            for category in CATEGORIES:
                if verdicts.get(category, True):
                    continue
                sig = signature(category, d.reference, other)
                entry = {
                    "mode": mode,
                    "category": category,
                    "signature": sig,
                    "seed": d.seed,
                    "scenario": d.scenario,
                    "pod": d.pod,
                    "nodes": d.nodes,
                    "reference": d.reference.to_dict(),
                    "ours": other.to_dict(),
                    "best": d.best,
                    "reference_scores": d.scores if category == "placement" else {},
                    "simulate_scores": (
                        {n: v for n, v in d.simulated.scores.items() if n in d.scores}
                        if category == "placement" and d.simulated is not None
                        else {}
                    ),
                    "replay": _replay(opts, d.seed, d.scenario),
                }
                if d.gang:
                    entry["gang"] = d.gang
                    entry["repaired"] = mode in d.repaired
                disagreements.append(entry)
                group = groups.setdefault(f"{mode}: {sig}", {"count": 0, "example": entry})
                group["count"] += 1
                if category == "message":
                    for diff in reason_diffs(d.reference.message, other.message):
                        item = reasons.setdefault(f"{mode}: {diff}", {"count": 0, "replay": entry["replay"]})
                        item["count"] += 1
    return {
        "command": " ".join(["kopf-scheduler", *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": _git_commit(),
        "versions": pinned_versions(),
        "seeds": opts.seeds,
        "scenarios": opts.indices(),
        "features": [k for k, v in vars(opts.features).items() if v],
        "config": str(opts.config) if opts.config else None,
        "decisions": len(decisions),
        "gangs": _gang_summary(decisions),
        # Every gang member's outcomes, as paired: what the pairing did can be checked by eye.
        "gang_members": [
            {
                "seed": d.seed,
                "scenario": d.scenario,
                "gang": d.gang,
                "pod": d.pod,
                "best": d.best,
                "reference": d.reference.to_dict(),
                **{m: o.to_dict() for m, o in (("live", d.ours), ("simulate", d.simulated)) if o is not None},
                "repaired": d.repaired,
            }
            for d in decisions
            if d.gang
        ],
        "seconds": round(seconds, 1),
        "rates": tally.rates(),
        "categories": dict(sorted(groups.items(), key=lambda kv: -int(kv[1]["count"]))),
        "message_reasons": dict(sorted(reasons.items(), key=lambda kv: -int(kv[1]["count"]))),
        "disagreements": disagreements,
        "errors": [
            {"seed": d.seed, "scenario": d.scenario, "pod": d.pod, "side": side, "error": o.error}
            for d in decisions
            for side, o in (("reference", d.reference), ("live", d.ours), ("simulate", d.simulated))
            if o is not None and o.error
        ],
        "rejected_by_apiserver": list(rejected),
    }


def _gang_summary(decisions: Sequence[Decision]) -> dict[str, int]:
    """What the reference did with the gangs' members: bound, failed, or never tried (short)."""
    members = [d for d in decisions if d.gang]
    groups = {(d.seed, d.scenario, d.gang) for d in members}
    whole = {g for g in groups if all(d.reference.node for d in members if (d.seed, d.scenario, d.gang) == g)}
    return {
        "groups": len(groups),
        "groups_bound_whole": len(whole),
        "members": len(members),
        "members_bound": sum(bool(d.reference.node) for d in members),
        "members_failed": sum(not d.reference.node and bool(d.reference.message) for d in members),
        "members_never_tried": sum(not d.reference.node and not d.reference.message for d in members),
        "members_repaired_live": sum("live" in d.repaired for d in members),
        "members_repaired_simulate": sum("simulate" in d.repaired for d in members),
    }


def markdown(result: Mapping[str, Any]) -> str:
    """The rates and the disagreement groups as Markdown tables (for docs/fidelity.md)."""
    lines = [
        f"{result['decisions']} decisions, seeds {result['seeds']}, {len(result['scenarios'])} scenarios "
        f"each, {result['seconds']} s, {result['date']}, commit {result['commit']}.",
        "",
        "| mode | " + " | ".join(CATEGORIES) + " |",
        "| --- |" + " --- |" * len(CATEGORIES),
    ]
    for mode, per in result["rates"].items():
        cells = [
            f"{100.0 * r['agreed'] / r['total']:.1f} % ({r['agreed']}/{r['total']})" if r["total"] else "n/a"
            for r in (per[c] for c in CATEGORIES)
        ]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| count | mode: category: kind | example (reference / ours) | replay |",
        "| --- | --- | --- | --- |",
    ]
    for name, group in result["categories"].items():
        ex = group["example"]
        ref, ours = ex["reference"], ex["ours"]
        if ex["category"] == "placement":
            shown = f"best {ex['best']} / `{ours.get('node')}`"
        elif ex["category"] == "nomination":
            shown = " / ".join(f"`{o.get('nominated')}` {o.get('victims', [])}" for o in (ref, ours))
        elif ex["category"] == "condition":
            shown = f"`{ref.get('condition_message', '')}` / `{ours.get('condition_message', '')}`"
        else:
            shown = " / ".join(f"`{o.get('message') or o.get('node', '')}`" for o in (ref, ours))
        name = name.replace("|", "\\|")
        lines.append(f"| {group['count']} | {name} | {shown.replace('|', '/')} | `{ex['replay']}` |")
    lines += ["", "| messages | mode: differing reason | first replay |", "| --- | --- | --- |"]
    for name, item in result.get("message_reasons", {}).items():
        lines.append(f"| {item['count']} | {name.replace('|', '/')} | `{item['replay']}` |")
    return "\n".join(lines)


async def _drive(plane: ControlPlane, opts: FidelityRun, logs: Path) -> Driver:
    plane.kubectl("apply", "-f", str(ROOT / "crds"))  # ours serves SchedulerProfiles
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    driver = Driver(plane, opts)
    ns = argparse.Namespace(profile_ours=None, reference_qps=1000.0)
    procs = driver.procs
    configs = config_files(opts, plane, logs) if opts.config else None
    if configs is not None:
        driver.sim_profiles = configs[2]
    try:
        await driver.start()
        for key in ("reference", "ours"):
            if key == "ours" and not opts.live:
                continue
            cmd, env = scheduler_command(SCHEDULERS[key], plane, ns, key)
            if configs is not None:  # both from the same file (cluster/runconfig.py, kube-scheduler's own)
                if key == "reference":
                    cmd = [str(plane.bin_path), "kube-scheduler", f"--secure-port={free_port()}"]
                    cmd += ["--bind-address=127.0.0.1", f"--config={configs[0]}"]
                else:
                    cmd = [sys.executable, "-m", "kopf_scheduler", "run", f"--config={configs[1]}"]
                    cmd += ["--metrics-host", "127.0.0.1", "--metrics-port", str(free_port())]
                if plane.workloads:  # gangs: GenericWorkload on (GangScheduling in the default profile)
                    cmd.append(f"--feature-gates={plane.feature_gates()}")
            elif key == "ours" and plane.workloads:  # the reference's command has it already
                cmd.append(f"--feature-gates={plane.feature_gates()}")
            if key == "reference":  # scores of every node: schedule_one.go's V(10) lines only
                cmd += ["--v=2", "--vmodule=schedule_one=10", "--log-flush-frequency=1s"]
            with (logs / f"{key}.log").open("wb") as out:
                procs[key] = subprocess.Popen(
                    cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, preexec_fn=die_with_parent
                )
        names = ["default-scheduler"] + (["kopf-scheduler"] if opts.live else [])
        await driver.warm_up(names, 120)
        for seed in opts.seeds:
            for index in opts.indices():
                await driver.scenario(seed, index)
        return driver
    finally:
        for proc in procs.values():
            stop_group(proc)
        await driver.watches.stop()
        await driver.api.close()


def run_fidelity(opts: FidelityRun) -> dict[str, Any]:
    """One run on a fresh control plane; writes and returns the report."""
    started = time.monotonic()
    binary = opts.kcp or build()
    plane = ControlPlane(binary, workloads=opts.features.gang)
    # Outside the plane's directory, which stopping it removes: the scores are read afterwards.
    logs = opts.logs or Path(tempfile.mkdtemp(prefix="kopf-scheduler-fidelity-"))
    logs.mkdir(parents=True, exist_ok=True)
    try:
        try:
            plane.start()
            driver = asyncio.run(_drive(plane, opts, logs))
        finally:
            plane.stop()
        tally = _judge_all(driver.decisions, logs / "reference.log")
    finally:
        if opts.logs is None:
            shutil.rmtree(logs, ignore_errors=True)
    result = report(opts, driver.decisions, tally, time.monotonic() - started, driver.rejected)
    result["table"] = tally.table()
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(result, indent=2))
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, nargs="+", default=[1], help="one or more seeds (default 1)")
    parser.add_argument("--scenarios", type=int, default=10, help="scenarios per seed (default 10)")
    parser.add_argument("--scenario", type=int, default=None, help="only this scenario index (a replay)")
    parser.add_argument(
        "--features",
        nargs="+",
        default=None,
        metavar="NAME",
        help=f"only these feature families: {', '.join(Features.__dataclass_fields__)} "
        "(default: all but gang, which needs GenericWorkload on and is drawn only when named)",
    )
    parser.add_argument("--out", type=Path, default=Path("fidelity-report.json"), help="the JSON report")
    parser.add_argument("--logs", type=Path, default=None, help="keep both schedulers' logs here")
    parser.add_argument("--no-live", action="store_true", help="skip ours live (simulate only)")
    parser.add_argument("--no-simulate", action="store_true", help="skip simulate")
    parser.add_argument("--settle", type=float, default=0.6, help="seconds after a scenario's setup")
    parser.add_argument(
        "--hold", type=float, default=1.5, help="seconds to watch a gang short of minCount (never tried)"
    )
    parser.add_argument("--markdown", type=Path, default=None, help="also write the summary as Markdown")
    parser.add_argument("--kcp", type=Path, default=None, help="a kcp binary (default: build or reuse)")
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="start both schedulers with this KubeSchedulerConfiguration (its profile under test "
        "renamed to each side's schedulerName)",
    )
    parser.add_argument(
        "--config-profile", default=None, help="the file's profile to test (default: the first)"
    )


def run(args: argparse.Namespace) -> int:
    opts = FidelityRun(
        seeds=list(args.seed),
        scenarios=args.scenarios,
        only_scenario=args.scenario,
        features=Features.only(args.features) if args.features else Features(),
        out=args.out,
        logs=args.logs,
        live=not args.no_live,
        simulated=not args.no_simulate,
        settle=args.settle,
        hold=args.hold,
        kcp=args.kcp,
        config=args.config,
        config_profile=args.config_profile,
    )
    result = run_fidelity(opts)
    if args.markdown:
        args.markdown.write_text(markdown(result) + "\n")
    print(result["table"])
    print(f"\n{result['decisions']} decisions in {result['seconds']}s; report: {opts.out}")
    if result["gangs"]["groups"]:
        print(
            "gangs (as the reference decided them): "
            + ", ".join(f"{k} {v}" for k, v in result["gangs"].items())
        )
    for name, group in list(result["categories"].items())[:20]:
        print(f"  {group['count']:4d}  {name}")
    return 0
