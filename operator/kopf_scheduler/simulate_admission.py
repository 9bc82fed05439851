"""What kube-apiserver v1.37.2 does to simulate's input objects before a scheduler sees them.

``simulate`` must schedule the objects the apiserver would have stored, or refuse what it would
have refused: a pod of a ``preemptionPolicy: Never`` class that preempts offline but not in the
cluster is a wrong answer, not a convenience. So the admission plugins that are on by default and
change what scheduling reads are applied here, in the apiserver's order, with its messages:

- PriorityClass validation and defaulting (``preemptionPolicy`` defaults to
  ``PreemptLowerPriority``, one ``globalDefault``, reserved ``system-`` names and values), and the
  two classes every apiserver creates at start (``system-node-critical``,
  ``system-cluster-critical``);
- Pod defaulting that placement depends on (container requests default to limits; a
  ``hostNetwork`` pod's ports are host ports);
- ``LimitRanger``: a namespace's LimitRange ``default``/``defaultRequest`` fill in what a container
  does not set (the LimitRange itself defaulted as stored: ``max`` -> ``default`` ->
  ``defaultRequest``, ``min`` -> ``defaultRequest``); its min/max checks are not applied;
- ``Priority``: ``priority``/``priorityClassName``/``preemptionPolicy`` from the class or the
  global default; a pod giving a different priority or policy of its own is forbidden;
- ``DefaultTolerationSeconds``: the not-ready and unreachable ``NoExecute`` tolerations;
- ``DefaultStorageClass``: a claim without ``storageClassName`` gets the default class;
- ``RuntimeClass``: ``spec.overhead`` and the class's node selector and tolerations.

Errors are :class:`AdmissionError` with the apiserver's own text, e.g.
``pods "web" is forbidden: no PriorityClass with name gold was found``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from kopf_scheduler.api.meta import ObjectMeta
from kopf_scheduler.api.quantity import QuantityError, parse_quantity
from kopf_scheduler.api.scheduling import PREEMPT_LOWER_PRIORITY, PriorityClass, parse_priority_class
from kopf_scheduler.api.storage import StorageClass

__all__ = [
    "HIGHEST_USER_DEFINABLE_PRIORITY",
    "SYSTEM_PRIORITY_CLASSES",
    "Admission",
    "AdmissionError",
]

PREEMPT_NEVER = "Never"
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_CRITICAL_PRIORITY = 2 * HIGHEST_USER_DEFINABLE_PRIORITY
SYSTEM_PREFIX = "system-"
DEFAULT_TOLERATION_SECONDS = 300
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
_INT32 = (-(2**31), 2**31 - 1)


class AdmissionError(ValueError):
    """The apiserver would refuse the object; the message is the one it answers with."""


# Created by every apiserver at start (the scheduling REST storage's post-start hook).
SYSTEM_PRIORITY_CLASSES = (
    PriorityClass(ObjectMeta("system-node-critical"), SYSTEM_CRITICAL_PRIORITY + 1000),
    PriorityClass(ObjectMeta("system-cluster-critical"), SYSTEM_CRITICAL_PRIORITY),
)


def _forbidden(resource: str, name: str, why: str) -> AdmissionError:
    return AdmissionError(f'{resource} "{name}" is forbidden: {why}')


def _invalid(name: str, *causes: str) -> AdmissionError:
    joined = causes[0] if len(causes) == 1 else "[" + ", ".join(causes) + "]"
    return AdmissionError(f'PriorityClass.scheduling.k8s.io "{name}" is invalid: {joined}')


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, Mapping) else ""


def _as_int32(raw: Any, what: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise AdmissionError(f"{what}: must be an integer")
    if not _INT32[0] <= raw <= _INT32[1]:
        raise AdmissionError(f"{what}: must be a 32-bit integer")
    return raw


class Admission:
    """The cluster-scoped objects admission consults, and the plugins that read them."""

    def __init__(self) -> None:
        self.priority_classes: dict[str, PriorityClass] = {
            pc.metadata.name: pc for pc in SYSTEM_PRIORITY_CLASSES
        }
        self.runtime_classes: dict[str, Mapping[str, Any]] = {}
        self.storage_classes: list[StorageClass] = []
        self.limit_ranges: dict[str, dict[str, Mapping[str, Any]]] = {}  # namespace -> name -> object

    # -- cluster-scoped objects, in input order --

    def add_priority_class(self, doc: Mapping[str, Any]) -> PriorityClass:
        """Validate and default a PriorityClass; returns the view of what the apiserver would store."""
        name = _name(doc)
        value = _as_int32(doc.get("value", 0), "value")
        global_default = bool(doc.get("globalDefault", False))
        policy = doc.get("preemptionPolicy")
        causes: list[str] = []
        if name.startswith(SYSTEM_PREFIX):
            known = next((pc for pc in SYSTEM_PRIORITY_CLASSES if pc.metadata.name == name), None)
            if known is None:
                why = f"{name} is not a known system priority class"
            elif known.value != value:
                why = f"value of {name} PriorityClass must be {known.value}"
            elif known.global_default != global_default:
                why = f"globalDefault of {name} PriorityClass must be {str(known.global_default).lower()}"
            else:
                why = ""
            if why:
                causes.append(
                    "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved "
                    f"for system use only. error: {why}"
                )
        elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
            causes.append(
                f"value: Forbidden: maximum allowed value of a user defined priority is "
                f"{HIGHEST_USER_DEFINABLE_PRIORITY}"
            )
        if policy is None:
            policy = PREEMPT_LOWER_PRIORITY
        elif policy == "":
            causes.append("preemptionPolicy: Required value")
        elif policy not in (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER):
            causes.append(
                f'preemptionPolicy: Unsupported value: "{policy}": supported values: '
                f'"{PREEMPT_LOWER_PRIORITY}", "{PREEMPT_NEVER}"'
            )
        if causes:
            raise _invalid(name, *causes)
        stored = parse_priority_class({**doc, "value": value, "preemptionPolicy": policy})
        existing = self.priority_classes.get(name)
        if existing is not None and name.startswith(SYSTEM_PREFIX):
            return stored  # the one the apiserver made
        if existing is not None:
            raise AdmissionError(f'priorityclasses.scheduling.k8s.io "{name}" already exists')
        if global_default:
            current = self.default_priority_class()
            if current is not None:
                raise _forbidden(
                    "priorityclasses.scheduling.k8s.io",
                    name,
                    f"PriorityClass {current.metadata.name} is already marked as default. "
                    "Only one default can exist",
                )
        self.priority_classes[name] = stored
        return stored

    def add_runtime_class(self, doc: Mapping[str, Any]) -> None:
        self.runtime_classes[_name(doc)] = doc

    def add_limit_range(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """Store a LimitRange defaulted as the apiserver stores it (``SetDefaults_LimitRangeItem``)."""
        stored = copy.deepcopy(dict(doc))
        for item in (stored.get("spec") or {}).get("limits") or ():
            if not isinstance(item, dict) or item.get("type") != "Container":
                continue
            default = item.setdefault("default", {})
            request = item.setdefault("defaultRequest", {})
            for key, value in (item.get("max") or {}).items():
                default.setdefault(key, value)
            for key, value in default.items():
                request.setdefault(key, value)
            for key, value in (item.get("min") or {}).items():
                request.setdefault(key, value)
        meta = stored.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        self.limit_ranges.setdefault(namespace, {})[_name(stored)] = stored
        return stored

    def add_storage_class(self, storage_class: StorageClass) -> None:
        self.storage_classes.append(storage_class)

    def default_priority_class(self) -> PriorityClass | None:
        """The global default; with several (possible only by racing creates) the lowest value."""
        best: PriorityClass | None = None
        for pc in self.priority_classes.values():
            if pc.global_default and (best is None or pc.value < best.value):
                best = pc
        return best

    def default_storage_class(self) -> str | None:
        """The default StorageClass: with several, the newest, then the first by name."""
        defaults = [
            sc
            for sc in self.storage_classes
            if any(sc.metadata.annotations.get(a, "").lower() == "true" for a in DEFAULT_CLASS_ANNOTATIONS)
        ]
        if not defaults:
            return None
        defaults.sort(key=lambda sc: sc.metadata.name)
        defaults.sort(key=lambda sc: sc.metadata.creation_timestamp, reverse=True)
        return defaults[0].metadata.name

    # -- namespaced objects --

    def admit_claim(self, doc: Mapping[str, Any]) -> Mapping[str, Any]:
        """DefaultStorageClass: only a claim with no ``storageClassName`` at all (not "")."""
        spec = doc.get("spec")
        if not isinstance(spec, Mapping) or spec.get("storageClassName") is not None:
            return doc
        default = self.default_storage_class()
        if default is None:
            return doc
        return {**doc, "spec": {**spec, "storageClassName": default}}

    def admit_pod(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """Defaulting, then the mutating admission plugins in the apiserver's order."""
        pod = copy.deepcopy(dict(doc))
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return pod
        name = _name(pod)
        _default_requests_from_limits(spec)
        _default_host_network_ports(spec)
        meta = pod.get("metadata") or {}
        self._limit_ranger(spec, str(meta.get("namespace") or "default"))
        self._priority(spec, name)
        _default_toleration_seconds(spec)
        self._runtime_class(spec, name)
        return pod

    def _limit_ranger(self, spec: dict[str, Any], namespace: str) -> None:
        """Each LimitRange of the namespace (by name) fills in the limits and requests a container
        lacks; the first to set a resource wins."""
        for _, lr in sorted(self.limit_ranges.get(namespace, {}).items()):
            limits: dict[str, Any] = {}
            requests: dict[str, Any] = {}
            for item in (lr.get("spec") or {}).get("limits") or ():
                if isinstance(item, Mapping) and item.get("type") == "Container":
                    requests.update(item.get("defaultRequest") or {})
                    limits.update(item.get("default") or {})
            for group in ("containers", "initContainers"):
                for container in spec.get(group) or ():
                    if not isinstance(container, dict):
                        continue
                    resources = container.setdefault("resources", {})
                    own_limits = resources.setdefault("limits", {})
                    own_requests = resources.setdefault("requests", {})
                    for key, value in limits.items():
                        own_limits.setdefault(key, value)
                    for key, value in requests.items():
                        own_requests.setdefault(key, value)

    def _priority(self, spec: dict[str, Any], name: str) -> None:
        class_name = spec.get("priorityClassName") or ""
        if class_name:
            pc = self.priority_classes.get(str(class_name))
            if pc is None:
                raise _forbidden("pods", name, f"no PriorityClass with name {class_name} was found")
            value, policy = pc.value, pc.preemption_policy
        else:
            default = self.default_priority_class()
            if default is not None:
                class_name, value, policy = default.metadata.name, default.value, default.preemption_policy
            else:
                value, policy = 0, PREEMPT_LOWER_PRIORITY
        given = spec.get("priority")
        if given is not None and given != value:
            raise _forbidden(
                "pods",
                name,
                f"the integer value of priority ({given}) must not be provided in pod spec; priority "
                f"admission controller computed {value} from the given PriorityClass name",
            )
        given_policy = spec.get("preemptionPolicy")
        if given_policy is not None and given_policy != policy:
            raise _forbidden(
                "pods",
                name,
                f"the string value of PreemptionPolicy ({given_policy}) must not be provided in pod spec; "
                f"priority admission controller computed {policy} from the given PriorityClass name",
            )
        if class_name:
            spec["priorityClassName"] = class_name
        spec["priority"] = value
        spec["preemptionPolicy"] = policy

    def _runtime_class(self, spec: dict[str, Any], name: str) -> None:
        rc_name = spec.get("runtimeClassName")
        rc: Mapping[str, Any] | None = None
        if rc_name is not None:
            rc = self.runtime_classes.get(str(rc_name))
            if rc is None:
                raise _forbidden("pods", name, f'pod rejected: RuntimeClass "{rc_name}" not found')
        overhead = rc.get("overhead") if rc is not None else None
        pod_fixed = overhead.get("podFixed") if isinstance(overhead, Mapping) else None
        mismatch = "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
        if pod_fixed is not None:  # setOverhead
            if spec.get("overhead") and not _same_resources(spec["overhead"], pod_fixed):
                raise _forbidden("pods", name, mismatch)
            spec["overhead"] = dict(pod_fixed)
        scheduling = rc.get("scheduling") if rc is not None else None
        if isinstance(scheduling, Mapping):  # setScheduling
            selector = dict(spec.get("nodeSelector") or {})
            for key, want in (scheduling.get("nodeSelector") or {}).items():
                have = selector.get(key)
                if have is not None and have != want:
                    raise _forbidden(
                        "pods",
                        name,
                        f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {want}; "
                        f"pod.spec.nodeSelector[{key}] = {have}",
                    )
                selector[key] = want
            if selector:
                spec["nodeSelector"] = selector
            spec["tolerations"] = _merge_tolerations(
                spec.get("tolerations") or [], scheduling.get("tolerations") or []
            )
        # validateOverhead: what the pod carries now must be the class's overhead, or nothing.
        if pod_fixed is not None:
            if not _same_resources(spec.get("overhead") or {}, pod_fixed):
                raise _forbidden("pods", name, mismatch)
        elif spec.get("overhead") is not None:
            raise _forbidden(
                "pods",
                name,
                "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead",
            )


def _default_requests_from_limits(spec: dict[str, Any]) -> None:
    """``SetDefaults_Pod``: a container's missing request defaults to its limit. It runs when the
    object is decoded, so before LimitRanger: a limit of the pod's own beats a LimitRange's
    default request."""
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or ():
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict) or not isinstance(resources.get("limits"), Mapping):
                continue
            requests = resources.setdefault("requests", {})
            if isinstance(requests, dict):
                for key, value in resources["limits"].items():
                    requests.setdefault(key, value)


def _default_host_network_ports(spec: dict[str, Any]) -> None:
    """A hostNetwork pod listens on the node: each port without a hostPort gets its containerPort."""
    if not spec.get("hostNetwork"):
        return
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or ():
            if not isinstance(container, dict):
                continue
            for port in container.get("ports") or ():
                if isinstance(port, dict) and not port.get("hostPort"):
                    port["hostPort"] = port.get("containerPort", 0)


def _default_toleration_seconds(spec: dict[str, Any]) -> None:
    """DefaultTolerationSeconds: tolerate not-ready and unreachable nodes for 300 s unless the pod
    already tolerates them (an empty key or effect counts as tolerating)."""
    tolerations = list(spec.get("tolerations") or [])
    not_ready = unreachable = False
    for t in tolerations:
        if not isinstance(t, Mapping):
            continue
        key, effect = t.get("key") or "", t.get("effect") or ""
        if effect in ("", "NoExecute"):
            not_ready = not_ready or key in ("", NOT_READY_TAINT)
            unreachable = unreachable or key in ("", UNREACHABLE_TAINT)
    for tolerated, key in ((not_ready, NOT_READY_TAINT), (unreachable, UNREACHABLE_TAINT)):
        if not tolerated:
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }
            )
    spec["tolerations"] = tolerations


def _merge_tolerations(first: Iterable[Any], second: Iterable[Any]) -> list[Any]:
    """The union, without repeating a toleration already there."""
    merged = [t for t in first]
    for t in second:
        if t not in merged:
            merged.append(t)
    return merged


def _same_resources(a: Any, b: Any) -> bool:
    """Resource lists equal as quantities (``1`` and ``1000m`` are the same cpu)."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping) or set(a) != set(b):
        return False
    try:
        return all(parse_quantity(a[k]) == parse_quantity(b[k]) for k in a)
    except QuantityError:
        return False
