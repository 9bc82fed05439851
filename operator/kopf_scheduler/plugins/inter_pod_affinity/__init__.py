"""InterPodAffinity (the reference's ``plugins/interpodaffinity``).

Filter: the incoming pod's required affinity (some pod matching *all* terms in the node's domain, or
the first-pod-of-a-group exception), its required anti-affinity, and the symmetry rule (an existing
pod's required anti-affinity that matches the incoming pod blocks its domain).
Score: the incoming pod's preferred terms against existing pods, and existing pods' preferred terms
(and required affinity terms, weighted ``hardPodAffinityWeight``) against the incoming pod.

PreFilter/PreScore count per topology pair (key, value); per-node partial results are memoised by
NodeInfo generation, and with a ``Snapshot`` the counts are running sums over its rows refreshed only
for rows whose generation moved (``TallyStore``), so a cycle after one bind recounts one node.
Filter/Score are lookups (``filter_vector`` / ``score_vector`` do them for all nodes with numpy).

Split by concern: ``args``, ``terms``, ``state`` and the plugin in ``plugin``.
"""

from kopf_scheduler.plugins.inter_pod_affinity.args import InterPodAffinityArgs
from kopf_scheduler.plugins.inter_pod_affinity.plugin import (
    ERR_REASON_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
    InterPodAffinity,
)
from kopf_scheduler.plugins.inter_pod_affinity.state import PRE_FILTER_KEY, PRE_SCORE_KEY
from kopf_scheduler.plugins.inter_pod_affinity.terms import AffinityTerm

__all__ = [
    "ERR_REASON_AFFINITY_RULES_NOT_MATCH",
    "ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH",
    "ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH",
    "PRE_FILTER_KEY",
    "PRE_SCORE_KEY",
    "AffinityTerm",
    "InterPodAffinity",
    "InterPodAffinityArgs",
]
