"""Feature gates the plugins consult, at kube-scheduler v1.37.2's defaults (``pkg/features``).

The reference's plugins receive a ``feature.Features`` struct copied from the process's gates; we
run with the defaults only, so this is a constant table. Gates whose 1.37 default is the only
behaviour we implement are listed too, so a reader sees which side of each gate the code is on.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["FEATURE_GATES"]

FEATURE_GATES: Mapping[str, bool] = MappingProxyType(
    {
        # volumebinding: score nodes by free capacity of dynamic provisioning (beta, on in 1.37)
        "StorageCapacityScoring": True,
        # nodevolumelimits: reject nodes lacking an opted-in CSI driver (beta, on in 1.37)
        "VolumeLimitScaling": True,
        # noderesources / NodeInfo: pod-level requests (beta, on since 1.34)
        "PodLevelResources": True,
        # noderesources / NodeInfo: status-aware requests (GA, locked on since 1.35)
        "InPlacePodVerticalScaling": True,
        # pod-level status resources in the requests (beta, on since 1.36)
        "InPlacePodLevelResourcesVerticalScaling": True,
        # nodedeclaredfeatures plugin (GA, locked on in 1.37)
        "NodeDeclaredFeatures": True,
        # tainttoleration: Lt/Gt toleration operators (alpha, off): such tolerations match nothing
        "TaintTolerationComparisonOperators": False,
        # deferred-resize handling in several plugins (alpha, off)
        "InPlacePodVerticalScalingSchedulerPreemption": False,
        # podtopologyspread (GA / beta, on)
        "NodeInclusionPolicyInPodTopologySpread": True,
        "MatchLabelKeysInPodTopologySpread": True,
        # volumebinding: VolumeAttributesClass checks (GA, locked on)
        "VolumeAttributesClass": True,
    }
)
