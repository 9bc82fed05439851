"""VolumeBinding: PVC/PV binding decisions made with the pod's placement (reference ``volumebinding``).

Claims are split once per pod (PreFilter) into bound claims, unbound WaitForFirstConsumer claims and
unbound Immediate claims. Filter checks that every bound claim's PV can be reached from the node and
that every delayed claim either matches the smallest fitting unbound PV or can be dynamically
provisioned there. Reserve "assumes" the node's decisions in an in-memory overlay of the PV/PVC
objects, so that the next pods (scheduled before the watch catches up) do not pick the same PV;
PreBind asks the edge to write them and waits until the PV controller reports the claims bound.

Split by concern as the reference's package: ``args``, ``state``, ``pv_util``, ``assume_cache``,
``scorer``, and the plugin in ``volume_binding``.
"""

from kopf_scheduler.plugins.volume_binding.args import UtilizationShapePoint, VolumeBindingArgs
from kopf_scheduler.plugins.volume_binding.volume_binding import VolumeBinding

__all__ = ["UtilizationShapePoint", "VolumeBinding", "VolumeBindingArgs"]
