"""A pod's ResourceClaims: which claim each ``spec.resourceClaims`` entry names (the reference's
``resourceclaim.Name`` and ``IsForPod``), with the reference's error texts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kopf_scheduler.api.objects import Pod

if TYPE_CHECKING:
    from kopf_scheduler.api.resource import ResourceClaim

__all__ = ["ClaimLookupError", "check_owner", "pod_claim_names"]


class ClaimLookupError(Exception):
    """Why the pod's claims cannot be used yet; ``str()`` is the reference's message."""


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


def check_owner(pod: Pod, claim: ResourceClaim) -> None:
    namespace, name = claim.metadata.namespace, claim.metadata.name
    if namespace != pod.namespace:
        raise ClaimLookupError(
            f"ResourceClaim {namespace}/{name} is not in the same namespace as Pod {pod.namespace}/{pod.name}"
        )
    for ref in claim.metadata.owner_references:
        if ref.controller and ref.uid == pod.uid:
            return
    raise ClaimLookupError(
        f"ResourceClaim {namespace}/{name} was not created for Pod {pod.namespace}/{pod.name} "
        "(Pod is not owner)"
    )
