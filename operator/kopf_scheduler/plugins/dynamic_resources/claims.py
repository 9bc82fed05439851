"""A pod's ResourceClaims: which claim each ``spec.resourceClaims`` entry names (the reference's
``resourceclaim.Name`` and ``IsForPod``), with the reference's error texts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kopf_scheduler.api.objects import Pod

__all__ = ["ClaimLookupError", "claim_is_reserved_for", "pod_claim_names", "uid_of"]

Raw = Mapping[str, Any]


class ClaimLookupError(Exception):
    """Why the pod's claims cannot be used yet; ``str()`` is the reference's message."""


def uid_of(obj: Raw) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def pod_claim_names(pod: Pod) -> list[tuple[str, str, bool]]:
    """``(pod claim name, claim name, must check owner)`` per claim that exists or must exist.

    Entries whose template the controller decided needs no claim are left out (a None status).
    """
    statuses = dict(pod.resource_claim_statuses)
    out: list[tuple[str, str, bool]] = []
    for entry in pod.resource_claims:
        if entry.resource_claim_name is not None:
            out.append((entry.name, entry.resource_claim_name, False))
        elif entry.resource_claim_template_name is not None:
            if entry.name not in statuses:
                raise ClaimLookupError(f'pod "{pod.namespace}/{pod.name}": ResourceClaim not created yet')
            name = statuses[entry.name]
            if name is not None:
                out.append((entry.name, name, True))
        else:
            raise ClaimLookupError(
                f'pod "{pod.namespace}/{pod.name}", spec.resourceClaim "{entry.name}": '
                "none of the supported fields are set"
            )
    return out


def check_owner(pod: Pod, claim: Raw) -> None:
    meta = claim.get("metadata") or {}
    namespace, name = meta.get("namespace") or "default", meta.get("name", "")
    if namespace != pod.namespace:
        raise ClaimLookupError(
            f"ResourceClaim {namespace}/{name} is not in the same namespace as Pod {pod.namespace}/{pod.name}"
        )
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("uid") == pod.uid:
            return
    raise ClaimLookupError(
        f"ResourceClaim {namespace}/{name} was not created for Pod {pod.namespace}/{pod.name} "
        "(Pod is not owner)"
    )


def claim_is_reserved_for(claim: Raw, pod_uid: str) -> bool:
    return any(r.get("uid") == pod_uid for r in (claim.get("status") or {}).get("reservedFor") or ())
