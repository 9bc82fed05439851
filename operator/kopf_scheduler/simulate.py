"""Offline what-if scheduling of YAML/JSON objects (the engine of ``kopf-scheduler simulate``).

The same engine as in the cluster (cache, queue, profiles, plugins, scheduler) runs over the
objects in the files with an in-memory ClusterClient: Nodes and bound Pods (``spec.nodeName``)
form the cluster, pending Pods whose ``schedulerName`` has a profile are scheduled in queue
order, and every other supported kind is made available to the plugins as ``handle.objects``.
The in-memory client plays the controllers the scheduler relies on: it binds volumes for
VolumeBinding's PreBind and deletes preemption victims, after which each preemptor gets the one
retry the real scheduler would give it once the victims are gone.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from kopf_scheduler.api import kinds
from kopf_scheduler.api.kinds import Objects, ObjectStore
from kopf_scheduler.api.objects import Node, Pod, parse_node, parse_pod
from kopf_scheduler.api.types import ObjectError
from kopf_scheduler.config import features
from kopf_scheduler.config import kubescheduler as ks
from kopf_scheduler.config.profile import ProfileError, SchedulerProfileSpec
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.profiles import load_profile, profiles_from_config
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler.simulate_admission import Admission, AdmissionError

__all__ = [
    "PodOutcome",
    "SimulationError",
    "add_feature_gates_argument",
    "documents_to_inputs",
    "feature_gates",
    "load_documents",
    "simulate",
]

PROFILE_API_VERSION = "kopfscheduler.io/v1alpha1"
# The kinds simulate takes into handle.objects (the informed ones and what admission expands),
# keyed as the cache keys them: from the registry of kinds.
_OBJECT_ROLES = (kinds.Role.OBJECT, kinds.Role.INPUT)
NAMESPACED = kinds.namespaced_kinds(*_OBJECT_ROLES)
CLUSTER_SCOPED = frozenset(k.kind for k in kinds.KINDS if not k.namespaced and k.role in _OBJECT_ROLES)


class SimulationError(ValueError):
    """A bad input document; the message names the file, document index and field."""


@dataclass(slots=True)
class PodOutcome:
    namespace: str
    name: str
    node: str
    message: str
    nominated_node: str = ""  # status.nominatedNodeName left by preemption
    victims: list[str] = field(default_factory=list)  # ns/name of the pods it preempted
    failures: list[str] = field(default_factory=list)  # every FailedScheduling message, in order
    # ``victims`` split by the attempt that preempted them: the first attempt is what the reference
    # is observed doing (the differential runner compares it), a retry may preempt more.
    victims_by_attempt: list[list[str]] = field(default_factory=list)
    # DynamicResources: claim name -> devices allocated to it ("driver/pool/device"), for a pod with claims.
    allocations: dict[str, list[str]] | None = None


@dataclass
class Inputs:
    nodes: list[Node] = field(default_factory=list)
    running: list[Pod] = field(default_factory=list)
    pending: list[Pod] = field(default_factory=list)
    profiles: list[SchedulerProfileSpec] = field(default_factory=list)
    objects: ObjectStore = field(default_factory=dict)
    # A KubeSchedulerConfiguration among the documents: its profiles are all that is served (the
    # SchedulerProfiles on top), as ``run --config`` serves them.
    config: ks.KubeSchedulerConfiguration | None = None
    serve_default: bool = True  # the built-in kopf-scheduler profile, when nothing replaces it


def _docs(paths: Sequence[str]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") if path != "-" else sys.stdin as fh:
                docs = list(yaml.safe_load_all(fh))
        except OSError as exc:
            raise SimulationError(f"{path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise SimulationError(f"{path}: not valid YAML/JSON: {exc}") from None
        index = 0
        for doc in docs:
            if doc is None:
                continue
            items = (
                doc.get("items")
                if isinstance(doc, Mapping) and doc.get("kind", "").endswith("List")
                else None
            )
            for item in items if isinstance(items, list) else [doc]:
                out.append((f"{path}: document {index}", item))
                index += 1
    return out


def load_documents(paths: Sequence[str]) -> Inputs:
    return documents_to_inputs(_docs(paths))


def documents_to_inputs(docs: Sequence[tuple[str, Any]]) -> Inputs:
    """``(where, object)`` pairs, from files or a live listing, as the objects the apiserver would
    have stored (see ``simulate_admission``; idempotent on objects it already admitted).

    Classes (PriorityClass, RuntimeClass, StorageClass) and LimitRanges are taken in first, whatever
    their place in the documents, as if created before the objects they apply to.
    """
    inputs = Inputs()
    admission = Admission()
    for where, doc in docs:
        if not isinstance(doc, Mapping):
            raise SimulationError(f"{where}: expected an object, got {type(doc).__name__}")
        kind = doc.get("kind")
        label = f"{where} ({kind} {_doc_name(doc)})"
        try:
            if kind == "PriorityClass":
                inputs.objects.setdefault(kind, {})[_doc_name(doc)] = admission.add_priority_class(doc)
            elif kind == "RuntimeClass":
                admission.add_runtime_class(doc)
            elif kind == "StorageClass":
                admission.add_storage_class(kinds.STORAGE_CLASS.parse(doc))
            elif kind == "LimitRange":
                admission.add_limit_range(doc)
        except (AdmissionError, ObjectError) as exc:
            raise SimulationError(f"{label}: {exc}") from None
    for where, doc in docs:
        kind = doc.get("kind")
        raw_meta = doc.get("metadata")
        meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
        name = str(meta.get("name", ""))
        if not kind:
            raise SimulationError(f"{where}: kind: required")
        label = f"{where} ({kind} {name})"
        try:
            if kind == "Node":
                inputs.nodes.append(parse_node(doc))
            elif kind == "Pod":
                pod = parse_pod(admission.admit_pod(doc))
                (inputs.running if pod.node_name else inputs.pending).append(pod)
            elif kind == ks.KIND:
                if inputs.config is not None:
                    raise SimulationError(f"{label}: only one KubeSchedulerConfiguration may be given")
                try:
                    inputs.config = ks.load_document(doc)
                    file_profiles = profiles_from_config(inputs.config)
                except ks.ConfigError as exc:  # the reference's words
                    raise SimulationError(f"{where} ({kind}): {exc}") from None
                inputs.serve_default = False
                if inputs.config.extenders:  # offline: no HTTP calls, and no silent difference either
                    print(
                        f"kopf-scheduler: {where} ({kind}): its {len(inputs.config.extenders)} HTTP "
                        "extender(s) are not called offline; placements are its profiles' alone",
                        file=sys.stderr,
                    )
            elif kind == "SchedulerProfile":
                if doc.get("apiVersion") != PROFILE_API_VERSION:
                    raise SimulationError(f"{label}: apiVersion: must be {PROFILE_API_VERSION!r}")
                spec = doc.get("spec")
                if not isinstance(spec, Mapping):
                    raise SimulationError(f"{label}: spec: required object")
                inputs.profiles.append(load_profile(spec))
            elif kind in ("PriorityClass", "RuntimeClass", "LimitRange"):
                if not name:
                    raise SimulationError(f"{label}: metadata.name: required")
            elif kind in NAMESPACED or kind in CLUSTER_SCOPED:
                if not name:
                    raise SimulationError(f"{label}: metadata.name: required")
                key = kinds.by_name(kind).key(meta)
                obj = dict(admission.admit_claim(doc)) if kind == "PersistentVolumeClaim" else dict(doc)
                if kind == "StorageClass" and not obj.get("volumeBindingMode"):
                    obj["volumeBindingMode"] = "Immediate"  # the apiserver's default
                # The typed view, parsed once here as the informers do; a malformed object is the
                # input's error, named with its document.
                inputs.objects.setdefault(kind, {})[key] = kinds.by_name(kind).parse(obj)
            else:
                raise SimulationError(f"{label}: kind: unsupported kind {kind!r}")
        except AdmissionError as exc:
            raise SimulationError(f"{label}: {exc}") from None
        except ObjectError as exc:
            raise SimulationError(f"{label}: {exc}") from None
        except ProfileError as exc:
            raise SimulationError(f"{label}: spec.{exc}") from None
    if inputs.config is not None:  # the file's profiles, SchedulerProfiles of the same name replacing them
        by_name = {p.scheduler_name: p for p in file_profiles}
        by_name.update({p.scheduler_name: p for p in inputs.profiles})
        inputs.profiles = list(by_name.values())
    inputs.pending = [_claims_from_templates(pod, inputs.objects) for pod in inputs.pending]
    return inputs


def _claims_from_templates(pod: Pod, objects: ObjectStore) -> Pod:
    """Play the resourceclaim controller: a claim per template entry, named in the pod's status.

    The controller names claims ``<pod>-<entry>-<random>``; here the suffix is left out so that
    runs are repeatable. A missing template leaves the entry without a claim, and the pod waits at
    PreEnqueue as it would in a cluster.
    """
    statuses = dict(pod.resource_claim_statuses)
    templates = kinds.objects_of(objects, kinds.RESOURCE_CLAIM_TEMPLATE)
    added = []
    for entry in pod.resource_claims:
        if entry.resource_claim_template_name is None or entry.name in statuses:
            continue
        template = templates.get(f"{pod.namespace}/{entry.resource_claim_template_name}")
        if template is None:
            continue
        name = f"{pod.name}-{entry.name}"
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": name,
                "namespace": pod.namespace,
                "uid": f"claim-{pod.namespace}-{name}",
                "resourceVersion": "1",
                "annotations": {"resource.kubernetes.io/pod-claim-name": entry.name},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": True}
                ],
            },
            "spec": json.loads(json.dumps(template.claim_spec_raw)),
        }
        kinds.store_of(objects, kinds.RESOURCE_CLAIM)[f"{pod.namespace}/{name}"] = (
            kinds.RESOURCE_CLAIM.parse(claim)
        )
        added.append({"name": entry.name, "resourceClaimName": name})
    if not added:
        return pod
    raw = dict(pod.raw)
    status = dict(raw.get("status") or {})
    status["resourceClaimStatuses"] = [*(status.get("resourceClaimStatuses") or ()), *added]
    raw["status"] = status
    return parse_pod(raw)


def _pod_allocations(
    pod: Pod, objects: Objects, extended: Mapping[str, Any] | None
) -> dict[str, list[str]] | None:
    """Claim -> devices, for the pod's claims and the claim made for its extended resources."""
    if not pod.resource_claims and extended is None:
        return None
    statuses = dict(pod.resource_claim_statuses)
    names = [entry.resource_claim_name or statuses.get(entry.name) for entry in pod.resource_claims]
    if extended is not None:
        names.append(str(extended.get("resourceClaimName") or ""))
    claims = kinds.objects_of(objects, kinds.RESOURCE_CLAIM)
    out: dict[str, list[str]] = {}
    for name in names:
        if not name:
            continue
        claim = claims.get(f"{pod.namespace}/{name}")
        if claim is None or not claim.is_reserved_for(pod.uid) or claim.status.allocation is None:
            out[name] = []
            continue
        out[name] = ["/".join(r.device_id) for r in claim.status.allocation.results]
    return out


def _doc_name(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""


async def simulate(inputs: Inputs, seed: int | None = None) -> list[PodOutcome]:
    """Schedule the pending pods once each, in queue order; outcomes in input order."""
    client = MemoryClusterClient(objects=inputs.objects)
    engine = new_engine(
        client,
        inputs.profiles,
        objects=inputs.objects,
        rng=random.Random(seed),
        opportunistic_batching=features.current().enabled("OpportunisticBatching"),
        with_default=inputs.serve_default,
    )
    cache, queue, profiles, sched, handlers = (
        engine.cache,
        engine.queue,
        engine.profiles,
        engine.scheduler,
        engine.handlers,
    )

    def bound(pod: Pod, node_name: str) -> None:  # the watch would deliver the bound pod
        import dataclasses

        cache.add_pod(dataclasses.replace(pod, node_name=node_name))

    client.on_bind = bound
    client.on_evict = handlers.delete_pod  # the watch would deliver the victim's deletion
    for node_spec in inputs.nodes:
        cache.add_node(node_spec)
    for pod in inputs.running:
        cache.add_pod(pod)
    # Gang scheduling: the PodGroups, and every pod naming one, as the event handlers feed them.
    for group in kinds.objects_of(inputs.objects, kinds.POD_GROUP).values():
        cache.pod_groups.set_group(group)
    for pod in (*inputs.running, *inputs.pending):
        cache.pod_groups.set_pod(pod)
    ours = [p for p in inputs.pending if p.scheduler_name in profiles]
    for pod in ours:
        queue.add(pod)
    attempts: dict[str, int] = {}
    victims_before: dict[str, list[int]] = {}  # pod key -> victims already evicted at each attempt
    while True:
        qpi = queue.pop_nowait()
        if qpi is None:
            break
        uid = qpi.pod.uid
        # Once, plus one retry after its victims were evicted (the real scheduler's next attempt).
        allowed = 2 if qpi.pod.key in client.preemptions else 1
        if attempts.get(uid, 0) >= allowed:
            queue.done(uid)
            continue
        attempts[uid] = attempts.get(uid, 0) + 1
        victims_before.setdefault(qpi.pod.key, []).append(len(client.preemptions.get(qpi.pod.key, ())))
        await sched.schedule_one(qpi)
        await sched.wait_for_bindings()
    await sched.wait_for_bindings()
    attempted = set(attempts)
    preempted_by = {v: p for p, victims in client.preemptions.items() for v in victims}

    outcomes = []
    for pod in inputs.pending:
        if pod.scheduler_name not in profiles:
            outcomes.append(
                PodOutcome(
                    pod.namespace, pod.name, "", f"no profile for schedulerName {pod.scheduler_name!r}"
                )
            )
            continue
        node = client.bindings.get(pod.key, "")
        messages = client.failed_messages(pod.key)
        if not node and not messages and pod.uid not in attempted:
            gates = ", ".join(pod.scheduling_gates)
            msg = f"not attempted: scheduling gated ({gates})" if gates else "not attempted"
            fw = profiles.get(pod.scheduler_name)
            held = fw.run_pre_enqueue_plugins(pod) if fw is not None and not gates else None
            if held is not None and held.is_rejected():  # what keeps it out of the queue, e.g. its gang
                msg = f"not attempted: {held.plugin}: {held.message}"
            messages = [msg]
        message = "" if node else (messages[-1] if messages else "")
        if pod.key in preempted_by:  # scheduled here, then preempted by a later pod
            node, message = "", f"preempted by {preempted_by[pod.key]}"
        outcomes.append(
            PodOutcome(
                pod.namespace,
                pod.name,
                node,
                message,
                client.nominations.get(pod.key, ""),
                list(client.preemptions.get(pod.key, ())),
                list(client.failed_messages(pod.key)),
                _split(client.preemptions.get(pod.key, []), victims_before.get(pod.key, [0])),
                _pod_allocations(pod, inputs.objects, client.extended_claim_statuses.get(pod.key))
                if node
                else ({} if pod.resource_claims else None),
            )
        )
    return outcomes


def _split(victims: Sequence[str], starts: Sequence[int]) -> list[list[str]]:
    """The victims of each attempt that preempted (an attempt starts after the previous one's evictions)."""
    bounds = [*starts, len(victims)]
    return [list(victims[a:b]) for a, b in itertools.pairwise(bounds) if b > a]


def add_feature_gates_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--feature-gates",
        action="append",
        default=[],
        help="kube-scheduler v1.37.2's feature gates, as run takes them (e.g. GenericWorkload=true)",
    )


def run_under_gates(args: argparse.Namespace, body: Callable[[argparse.Namespace], int]) -> int:
    """``body(args)`` under ``--feature-gates`` (profiles are defaulted and plugins built under
    them); gates the reference would refuse are a one-line error and exit 2, as simulate's and
    explain's commands answer them."""
    try:
        gates = feature_gates(args)
    except features.FeatureGateError as exc:
        print(f"error: --feature-gates: {exc}", file=sys.stderr)
        return 2
    with features.using(gates):
        return body(args)


def feature_gates(args: argparse.Namespace) -> features.FeatureGates:
    """``--feature-gates`` as given (features.FeatureGateError if the reference would refuse them);
    ``args`` from a parser given :func:`add_feature_gates_argument` (its default: none)."""
    return features.FeatureGates.parse(args.feature_gates)


def dataclass_dict(o: PodOutcome) -> dict[str, Any]:
    out: dict[str, Any] = {
        "namespace": o.namespace,
        "name": o.name,
        "node": o.node,
        "nominatedNode": o.nominated_node,
        "victims": list(o.victims),
        "message": o.message,
    }
    if o.allocations is not None:
        out["allocations"] = o.allocations
    return out
