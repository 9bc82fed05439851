"""A pod's containers and status conditions (core/v1), parsed once into what the engine reads.

The plugins that look past a pod's summed requests read its containers one by one: ImageLocality
their images, DRA's extended resources each container's requests (and whether an init container
is a sidecar), an extender's ``IsInterested`` the resource names each requests or limits, and
NodeDeclaredFeatures the restart rules and mount options that need a node feature. Preemption
reads the status conditions (and the cluster client those it writes). Parsing them here keeps
``Pod.raw`` out of the engine.

Containers are the same in every pod of a template: ``parse_pod`` memoises them with the requests
(by what they depend on, see ``container_key``), so a listing of 50,000 pods parses each template's
containers once; the views are frozen and shared between those pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kopf_scheduler.api.quantity import QuantityError, parse_quantity
from kopf_scheduler.api.types import ObjectError, as_list, as_mapping

__all__ = [
    "DISRUPTION_TARGET",
    "POD_SCHEDULED",
    "READ_CONDITIONS",
    "RESTART_ALL_CONTAINERS",
    "Container",
    "PodCondition",
    "has_bind_mount_options",
    "parse_conditions",
    "parse_container",
    "parse_containers",
    "restarts_all",
]

POD_SCHEDULED = "PodScheduled"
DISRUPTION_TARGET = "DisruptionTarget"
RESTART_ALL_CONTAINERS = "RestartAllContainers"  # a restartPolicyRules action


@dataclass(frozen=True, slots=True)
class Container:
    """One entry of ``spec.containers``, ``spec.initContainers`` or ``spec.ephemeralContainers``."""

    name: str
    image: str = ""  # "" when not set
    restart_policy: str = ""  # an init container's "Always" makes it a sidecar (long-lived)
    # resources.requests and resources.limits as written (not defaulted from each other), exact.
    requests: Mapping[str, Fraction] = field(default_factory=dict)
    limits: Mapping[str, Fraction] = field(default_factory=dict)
    # restartPolicyRules has a RestartAllContainers action (NodeDeclaredFeatures).
    restart_all_containers: bool = False
    # A volumeMount sets bindMountOptions (NodeDeclaredFeatures).
    bind_mount_options: bool = False

    @property
    def sidecar(self) -> bool:
        """An init container that keeps running beside the others (``restartPolicy: Always``)."""
        return self.restart_policy == "Always"


def _is_mapping(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)  # the ABC check only for the rare others


def restarts_all(container: Mapping[str, Any]) -> bool:
    """``restartPolicyRules`` has a RestartAllContainers action."""
    rules = container.get("restartPolicyRules")
    if type(rules) is not list:
        return False
    return any(_is_mapping(r) and r.get("action") == RESTART_ALL_CONTAINERS for r in rules)


def has_bind_mount_options(container: Mapping[str, Any]) -> bool:
    """A ``volumeMounts`` entry sets ``bindMountOptions``: it runs for every container of every
    pod listed (the memo's key), so a plain loop."""
    mounts = container.get("volumeMounts")
    if type(mounts) is not list:
        return False
    for m in mounts:  # noqa: SIM110 - no generator per container
        if _is_mapping(m) and m.get("bindMountOptions"):
            return True
    return False


def _quantities(raw: Any, path: str) -> Mapping[str, Fraction]:
    if not raw:
        return {}
    out: dict[str, Fraction] = {}
    for name, qty in as_mapping(raw, path).items():
        try:
            out[str(name)] = parse_quantity(qty)
        except QuantityError as exc:
            raise ObjectError(f"{path}.{name}", str(exc)) from None
    return out


def parse_container(raw: Any, path: str) -> Container:
    c = as_mapping(raw, path)
    resources = as_mapping(c.get("resources"), f"{path}.resources")
    return Container(
        name=str(c.get("name") or ""),
        image=str(c.get("image") or ""),
        restart_policy=str(c.get("restartPolicy") or ""),
        requests=_quantities(resources.get("requests"), f"{path}.resources.requests"),
        limits=_quantities(resources.get("limits"), f"{path}.resources.limits"),
        restart_all_containers=restarts_all(c),
        bind_mount_options=has_bind_mount_options(c),
    )


def parse_containers(raw: Any, path: str) -> tuple[Container, ...]:
    """A list of containers (``path`` is ``spec.containers`` or the like)."""
    if raw is None:
        return ()
    return tuple(parse_container(c, f"{path}[{i}]") for i, c in enumerate(as_list(raw, path)))


@dataclass(frozen=True, slots=True)
class PodCondition:
    """One of ``status.conditions``: what the scheduler compares before writing one."""

    type: str
    status: str = ""
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""  # as written: a condition rewritten unchanged keeps it


# The conditions the scheduler reads (and writes): a running pod lists four or five others, and the
# informer parses 50,000 pods at start-up, so the view keeps only these.
READ_CONDITIONS = frozenset({POD_SCHEDULED, DISRUPTION_TARGET})


def parse_conditions(raw: Any) -> tuple[PodCondition, ...]:
    """The pod's conditions of the types in ``READ_CONDITIONS``, in their order, but PodScheduled
    once True: the scheduler compares the PodScheduled it writes (False, with a reason) with the
    pod's, and a True one never equals it; every bound pod has one, and nothing else reads it."""
    if not raw:
        return ()
    out = []
    for i, c in enumerate(as_list(raw, "status.conditions")):
        if type(c) is not dict:  # the path is formatted only for the rare others
            c = as_mapping(c, f"status.conditions[{i}]")
        ctype = c.get("type")
        if type(ctype) is not str or ctype not in READ_CONDITIONS:
            continue
        status = str(c.get("status") or "")
        if ctype == POD_SCHEDULED and status == "True":
            continue
        out.append(
            PodCondition(
                ctype,
                status,
                str(c.get("reason") or ""),
                str(c.get("message") or ""),
                str(c.get("lastTransitionTime") or ""),
            )
        )
    return tuple(out)
