"""Extension points, statuses and cycle state (the reference's ``framework/interface.go``).

Plugins are plain classes with a ``name`` and the methods of the extension points they
implement. Every extension point and every optional capability (a Filter plugin's
``filter_vector``, a Score plugin's ``normalize_score``, ``events_to_register``...) is a protocol
here; :data:`EXTENSION_POINT_PROTOCOLS` and :data:`CAPABILITIES` list them. A plugin may declare
them by subclassing (the counterpart of Go's ``var _ fwk.FilterPlugin = &Fit{}``: mypy then checks
the signatures) or just implement them; either way the registry checks a plugin class when it is
registered (``framework/registry.py``): a capability declared but not implemented, implemented in
part, without the extension point it extends, or a method named like a hook that is none (a
misspelling) is an error naming the plugin. The framework resolves each capability once, when it
is built, into lists per capability: nothing is probed per pod.

The binding-side points (PreBind, Bind, PostBind) and Permit's wait are ``async``: they run in
the binding cycle, which is where the operator's I/O happens. Everything else is synchronous
and pure.

Vector extensions: a Filter or Score plugin may also offer ``filter_vector`` / ``score_vector``
which work on many nodes at once with numpy. They must agree exactly with the per-node method;
the runtime uses them for speed and falls back to the per-node method for the statuses it
reports (the per-node method is the reference).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from kopf_scheduler.api.kinds import Objects
from kopf_scheduler.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
    QueueingHintFn,
)

if TYPE_CHECKING:
    import numpy as np

    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.api.podgroup import PodGroup
    from kopf_scheduler.dra.manager import DraManager
    from kopf_scheduler.framework.client import ClusterClient
    from kopf_scheduler.framework.extender import Extender
    from kopf_scheduler.framework.snapshot import Snapshot
    from kopf_scheduler.framework.types import NodeInfo, QueuedPodInfo
    from kopf_scheduler.metrics.recorder import MetricsRecorder

__all__ = [
    "CAPABILITIES",
    "EXTENSION_POINT_PROTOCOLS",
    "MAX_NODE_SCORE",
    "MIN_NODE_SCORE",
    "ActionType",
    "AsyncPodGroupPreemptionPlugin",
    "AsyncPreemptionPlugin",
    "BindPlugin",
    "ClusterEvent",
    "ClusterEventWithHint",
    "Code",
    "CycleState",
    "EnqueueExtensions",
    "EventResource",
    "FilterPlugin",
    "FilterStatuses",
    "Handle",
    "NodeLister",
    "PermitPlugin",
    "PlacementFeasiblePlugin",
    "PlacementGeneratePlugin",
    "PlacementProgress",
    "PlacementScorePlugin",
    "Plugin",
    "PodGroupManager",
    "PodGroupPostFilterPlugin",
    "PodGroupPostFilterResult",
    "PodGroupSimulation",
    "PodNominator",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PostFilterWithExtenders",
    "PreBindPlugin",
    "PreBindPreFlightPlugin",
    "PreEnqueuePlugin",
    "PreEnqueueSharedVerdict",
    "PreFilterExtensions",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreQueueingHintResult",
    "PreQueueingHints",
    "PreScorePlugin",
    "ProposedAssignment",
    "QueueSortPlugin",
    "QueueingHint",
    "QueueingHintFn",
    "ReservePlugin",
    "ScoreExtensions",
    "ScorePlugin",
    "SignFragments",
    "SignPlugin",
    "StateData",
    "Status",
    "VectorFilter",
    "VectorScore",
    "implements",
    "is_success",
    "protocol_methods",
]

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0
MAX_TOTAL_SCORE = 2**63 - 1


class Code(enum.IntEnum):
    """Status codes, in the reference's order and meaning."""

    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5
    PENDING = 6


class Status:
    """A plugin's verdict. ``None`` may stand for Success wherever a Status is returned."""

    __slots__ = ("code", "error", "plugin", "reasons")

    def __init__(
        self, code: Code = Code.SUCCESS, *reasons: str, plugin: str = "", error: BaseException | None = None
    ) -> None:
        self.code = code
        self.reasons: list[str] = list(reasons)
        self.plugin = plugin
        self.error = error
        if error is not None and not self.reasons:
            self.reasons = [str(error)]

    @classmethod
    def unschedulable(cls, *reasons: str) -> Status:
        return cls(Code.UNSCHEDULABLE, *reasons)

    @classmethod
    def unresolvable(cls, *reasons: str) -> Status:
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, *reasons)

    @classmethod
    def as_error(cls, error: BaseException) -> Status:
        return cls(Code.ERROR, error=error)

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def is_success(self) -> bool:
        return self.code == Code.SUCCESS

    def is_skip(self) -> bool:
        return self.code == Code.SKIP

    def is_wait(self) -> bool:
        return self.code == Code.WAIT

    def is_rejected(self) -> bool:
        """Unschedulable, UnschedulableAndUnresolvable or Pending."""
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.PENDING)

    def with_plugin(self, plugin: str) -> Status:
        self.plugin = plugin
        return self

    def __repr__(self) -> str:
        return f"Status({self.code.name}, {self.reasons!r}, plugin={self.plugin!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Status):
            return NotImplemented
        return self.code == other.code and self.reasons == other.reasons


def is_success(status: Status | None) -> bool:
    return status is None or status.code == Code.SUCCESS


@runtime_checkable
class StateData(Protocol):
    """What a plugin writes into the CycleState (the reference's ``fwk.StateData``).

    ``clone()`` gives the copy a preemption what-if run may change (AddPod/RemovePod) without
    touching this cycle's; an immutable value may return itself.
    """

    def clone(self) -> StateData: ...


@functools.cache
def _is_state_data(cls: type) -> bool:
    """Whether ``cls`` implements :class:`StateData`; asked once per class (an isinstance check
    against a protocol walks its members, some microseconds: too slow for every write)."""
    return issubclass(cls, StateData)


class CycleState:
    """Per-cycle scratch space shared by a pod's plugins (``framework.CycleState``): values are
    :class:`StateData`, checked when written, so ``clone()`` never has to guess."""

    __slots__ = (
        "_data",
        "pod_group_state",
        "record_plugin_metrics",
        "skip_filter_plugins",
        "skip_score_plugins",
    )

    def __init__(self) -> None:
        self._data: dict[str, StateData] = {}
        self.skip_filter_plugins: set[str] = set()
        self.skip_score_plugins: set[str] = set()
        # This cycle times each plugin call (plugin_execution_duration_seconds is sampled).
        self.record_plugin_metrics = False
        # A member's attempt inside a pod group cycle: the group's cycle state, shared by its members'
        # plugins and read by its PodGroupPostFilter (``SetPodGroupSchedulingCycle``); None otherwise.
        self.pod_group_state: CycleState | None = None

    @property
    def pod_group_cycle(self) -> bool:
        """A pod group member's attempt (``IsPodGroupSchedulingCycle``): no per-pod PostFilter (the
        group has its own), Permit once the whole group is placed."""
        return self.pod_group_state is not None

    def read(self, key: str) -> Any:
        """Raise KeyError when absent, as the reference returns ErrNotFound."""
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def write(self, key: str, value: StateData) -> None:
        """Raise TypeError for a value without ``clone()``, naming the key: a plugin's state that
        a what-if run could not copy is refused where it is written, not cloned by chance."""
        if not _is_state_data(type(value)):
            raise TypeError(f"cycle state {key!r}: {type(value).__name__} is not StateData (no clone())")
        self._data[key] = value

    def delete(self, key: str) -> None:
        self._data.pop(key, None)

    def clone(self) -> CycleState:
        """Every value cloned (for preemption's what-if runs)."""
        other = CycleState()
        other._data = {k: v.clone() for k, v in self._data.items()}
        other.skip_filter_plugins = set(self.skip_filter_plugins)
        other.skip_score_plugins = set(self.skip_score_plugins)
        other.record_plugin_metrics = self.record_plugin_metrics
        other.pod_group_state = self.pod_group_state  # the group's, shared (not cloned)
        return other


# --- results ------------------------------------------------------------------------------------


@dataclass(slots=True)
class PreFilterResult:
    """``node_names`` narrows the nodes to evaluate; None means all nodes."""

    node_names: set[str] | None = None

    def merge(self, other: PreFilterResult | None) -> PreFilterResult:
        if other is None or other.node_names is None:
            return PreFilterResult(None if self.node_names is None else set(self.node_names))
        if self.node_names is None:
            return PreFilterResult(set(other.node_names))
        return PreFilterResult(self.node_names & other.node_names)


@dataclass(slots=True)
class PostFilterResult:
    nominated_node_name: str = ""
    victims: list[Pod] = field(default_factory=list)


# --- the lister plugins see ---------------------------------------------------------------------


@runtime_checkable
class NodeLister(Protocol):
    """What a plugin may read of the snapshot (``framework.SharedLister``)."""

    def list(self) -> Sequence[NodeInfo]: ...

    def get(self, node_name: str) -> NodeInfo | None: ...

    def have_pods_with_affinity_list(self) -> Sequence[NodeInfo]: ...

    def have_pods_with_required_anti_affinity_list(self) -> Sequence[NodeInfo]: ...


class PodNominator(Protocol):
    """Pods nominated to nodes by preemption (``framework.PodNominator``); the queue owns one."""

    def add_nominated_pod(self, pod: Pod, node_name: str = "") -> None: ...

    def delete_nominated_pod_if_exists(self, pod: Pod) -> None: ...

    def update_nominated_pod(self, old: Pod, new: Pod) -> None: ...

    def nominated_pods_for_node(self, node_name: str) -> list[Pod]: ...

    def __len__(self) -> int:
        """How many pods are nominated (0 lets filtering skip the nominated-pods pass)."""
        ...


class PodGroupManager(Protocol):
    """Pod groups as the scheduler sees them (``fwk.PodGroupManager``): the PodGroup objects and
    every pod naming one, pending or placed (bound, or assumed by us)."""

    def get(self, namespace: str, name: str) -> PodGroup | None: ...

    def all_pods_count(self, namespace: str, name: str) -> int: ...

    def scheduled_count(self, namespace: str, name: str) -> int: ...

    def unscheduled_pods(self, namespace: str, name: str) -> list[Pod]: ...


class Handle(Protocol):
    """What plugins get from the framework at construction (``framework.Handle``): the
    framework's own services, fixed for its lifetime, and the runner preemption's what-ifs use."""

    @property
    def snapshot(self) -> NodeLister:
        """The cycle's snapshot (the same object every cycle; refreshed in place)."""
        ...

    # Cluster objects other than pods and nodes (PVCs, PVs, StorageClasses, CSINodes, PDBs,
    # Namespaces), keyed by kind then by "namespace/name" or "name". Filled by the edge.
    @property
    def objects(self) -> Objects: ...

    @property
    def client(self) -> ClusterClient | None:
        """The cluster's writes, for binding-side plugins; None in a framework that never binds."""
        ...

    @property
    def nominator(self) -> PodNominator | None: ...

    @property
    def parallelism(self) -> int: ...

    @property
    def metrics(self) -> MetricsRecorder: ...

    @property
    def pod_groups(self) -> PodGroupManager | None:
        """None in a framework built without one (then no pod is a group member to it)."""
        ...

    @property
    def dra(self) -> DraManager:
        """The DRA manager (claim tracker, CEL and pool caches), shared by every profile."""
        ...

    def nominated_pods_for_node(self, node_name: str) -> list[Pod]: ...

    def run_filter_plugins_with_nominated_pods(
        self, state: CycleState, pod: Pod, node_info: NodeInfo
    ) -> Status | None: ...

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo
    ) -> Status | None: ...

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
    ) -> Status | None: ...


# --- plugins ------------------------------------------------------------------------------------


class Plugin:
    """Base class for in-tree plugins; out-of-tree plugins may use it or just have ``name`` (and
    ``Args``: the registry checks it when the class is registered)."""

    name: str = ""
    # The type of the plugin's pluginConfig args (the reference's typed args: validated and
    # defaulted by pydantic when a profile is resolved): a dataclass (its fields' metadata and
    # ``__pydantic_config__`` as in config/profile.py; pydantic is imported at the first
    # validation) or a pydantic model. None: the plugin takes no args.
    Args: ClassVar[type | None] = None

    def __init__(self, args: Any = None, handle: Handle | None = None) -> None:
        self.args = args
        self.handle = handle


@runtime_checkable
class PreEnqueuePlugin(Protocol):
    name: str

    def pre_enqueue(self, pod: Pod) -> Status | None: ...


@runtime_checkable
class PreEnqueueSharedVerdict(Protocol):
    """Optional on a PreEnqueue plugin: pods of one (non-None) key get the same PreEnqueue answer
    from it while the cluster stays as it is, so one pass of the queue over its waiting pods asks it
    once a key. Why: the reference queues a pod group as one entity that arriving members join; ours
    queues members singly, and each arriving member of a gang re-ran PreEnqueue for every member
    already waiting (O(members^2): 3.6 ms of CPU a pod for a gang of 1,000)."""

    name: str

    def pre_enqueue_shared_by(self, pod: Pod) -> Hashable | None: ...


@runtime_checkable
class QueueSortPlugin(Protocol):
    name: str

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool: ...


@runtime_checkable
class EnqueueExtensions(Protocol):
    name: str

    def events_to_register(self) -> Iterable[ClusterEventWithHint]: ...


@dataclass(frozen=True, slots=True)
class PreQueueingHintResult:
    """A PreQueueingHint's answer (``fwk.PreQueueingHintResult``): ``all_pods`` (it cannot narrow
    the event), else ``keys``: the index keys (:meth:`PreQueueingHints.pre_queueing_keys`) of the
    only waiting pods the event may concern."""

    keys: frozenset[Hashable] = frozenset()
    all_pods: bool = False


@runtime_checkable
class PreQueueingHints(Protocol):
    """Optional on a plugin with EnqueueExtensions: the reference's ``PreQueueingHintFn`` and the
    pod index it reads. ``pre_queueing_keys`` is the index function (the reference's informer
    indexer; the queue keeps the index of its waiting pods current as they come, change and go);
    ``pre_queueing_hint`` names the keys of the pods an event may concern, ``all_pods``, or None
    for an event it has no PreQueueingHint for.

    The contract that makes it a pure cost change: for an event it narrows, this plugin's
    QueueingHint answers QueueSkip for every waiting pod none of whose keys it named. Why: without
    it every event walks every waiting pod's hints (O(pods) an event); DynamicResources' claim
    events, several a pod, made SchedulingWithResourceClaimTemplate O(pods^2) (issue 30)."""

    name: str

    def pre_queueing_keys(self, pod: Pod) -> Iterable[Hashable]: ...

    def pre_queueing_hint(self, event: ClusterEvent, old: Any, new: Any) -> PreQueueingHintResult | None: ...


@runtime_checkable
class PreFilterPlugin(Protocol):
    name: str

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]: ...


@runtime_checkable
class PreFilterExtensions(Protocol):
    """Optional on a PreFilter plugin, as ``add_pod``/``remove_pod`` methods (used by preemption)."""

    name: str

    def add_pod(
        self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo
    ) -> Status | None: ...

    def remove_pod(
        self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
    ) -> Status | None: ...


@runtime_checkable
class FilterPlugin(Protocol):
    name: str

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None: ...


@runtime_checkable
class VectorFilter(Protocol):
    """Optional: ``filter_vector(state, pod, snapshot, idx) -> bool mask over idx`` or None (use per-node)."""

    name: str

    def filter_vector(
        self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray
    ) -> np.ndarray | None: ...


@runtime_checkable
class FilterStatuses(Protocol):
    """Optional on a Filter plugin: ``filter``'s statuses for many rejected rows at once (a status
    may be shared by rows with the same outcome), or None to ask ``filter`` node by node."""

    name: str

    def filter_statuses(
        self, state: CycleState, pod: Pod, snapshot: Any, rows: np.ndarray
    ) -> Sequence[Status] | None: ...


@runtime_checkable
class PostFilterPlugin(Protocol):
    name: str

    def post_filter(
        self, state: CycleState, pod: Pod, node_statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status | None]: ...


@runtime_checkable
class PostFilterWithExtenders(Protocol):
    """Optional on a PostFilter plugin: its PostFilter when HTTP extenders are configured, asking
    them too (preemption's ``callExtenders``)."""

    name: str

    async def post_filter_with_extenders(
        self, state: CycleState, pod: Pod, node_statuses: Mapping[str, Status], extenders: Sequence[Extender]
    ) -> tuple[PostFilterResult | None, Status | None]: ...


@runtime_checkable
class AsyncPreemptionPlugin(Protocol):
    """A PostFilter plugin whose preemption the scheduler carries out in the background: it is
    told when the evictions start and finish (its PreEnqueue holds the preemptor meanwhile)."""

    name: str

    def preemption_started(self, pod_uid: str) -> None: ...

    def preemption_finished(self, pod_uid: str) -> None: ...


@runtime_checkable
class AsyncPodGroupPreemptionPlugin(Protocol):
    """A PodGroupPostFilter plugin told when the scheduler starts and ends the evictions for a
    group (by PodGroup key), so its PreEnqueue can hold the group's members meanwhile."""

    name: str

    def pod_group_preemption_started(self, group_key: str) -> None: ...

    def pod_group_preemption_finished(self, group_key: str) -> None: ...


@runtime_checkable
class PreScorePlugin(Protocol):
    name: str

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status | None: ...


@runtime_checkable
class ScorePlugin(Protocol):
    name: str

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]: ...


@runtime_checkable
class ScoreExtensions(Protocol):
    """Optional on a Score plugin: ``normalize_score`` rescales the scores in place (numpy int64)."""

    name: str

    def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Status | None: ...


@runtime_checkable
class VectorScore(Protocol):
    """Optional: ``score_vector(state, pod, snapshot, idx) -> int64 scores over idx`` or None."""

    name: str

    def score_vector(
        self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray
    ) -> np.ndarray | None: ...


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None: ...

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None: ...


@runtime_checkable
class PermitPlugin(Protocol):
    name: str

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status | None, float]:
        """Return (status, timeout seconds); a Wait status parks the pod until allowed or timed out."""
        ...


@runtime_checkable
class PreBindPlugin(Protocol):
    name: str

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None: ...


@runtime_checkable
class PreBindPreFlightPlugin(Protocol):
    """A PreBind plugin telling, before WaitOnPermit, whether its PreBind will act (None/Success),
    has nothing to do (Skip) or cannot (Error): the reference's ``PreBindPreFlight``. Any PreBind
    acting means binding may take a while, so the scheduler publishes the chosen node as
    ``nominatedNodeName`` first (NominatedNodeNameForExpectation). A PreBind plugin without this
    method is never counted as acting."""

    name: str

    def pre_bind_pre_flight(self, state: CycleState, pod: Pod, node_name: str) -> Status | None: ...


@runtime_checkable
class BindPlugin(Protocol):
    name: str

    async def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        """Return a Skip status to let the next Bind plugin act."""
        ...


@runtime_checkable
class PostBindPlugin(Protocol):
    name: str

    async def post_bind(self, state: CycleState, pod: Pod, node_name: str) -> None: ...


@dataclass(slots=True, frozen=True)
class PlacementProgress:
    """How far a pod group cycle got (``framework.PlacementProgress``): members placed (before or in
    this cycle) and members still to try."""

    scheduled: int
    remaining: int


@runtime_checkable
class PlacementFeasiblePlugin(Protocol):
    """Asked before and after each member of a pod group cycle: Success once the group's constraints
    hold, Wait while they still may, Unschedulable when they no longer can (ends the cycle)."""

    name: str

    def placement_feasible(self, group: PodGroup, progress: PlacementProgress) -> Status | None: ...


@dataclass(slots=True)
class ProposedAssignment:
    """One member's place in a what-if placement of its group (``fwk.ProposedAssignment``):
    ``node_name`` is "" for a member that found none; ``state`` is its cycle's state."""

    pod: Pod
    node_name: str
    state: CycleState


@dataclass(slots=True)
class PodGroupPostFilterResult:
    """Workload-aware preemption's decision: the node each member is nominated to (by pod uid)
    and the pods to evict, most important first."""

    nominations: dict[str, str] = field(default_factory=dict)
    victims: list[Pod] = field(default_factory=list)
    disruptions: int = 0  # units that are (or belong to) pod groups
    pdb_violations: int = 0


class PodGroupSimulation(Protocol):
    """What a PodGroupPostFilter plugin may do to the cycle's snapshot (the reference's mutable
    snapshot lister and ``PodGroupSchedulingFunc``). Its changes last until the plugin returns;
    then the scheduler puts the snapshot back as its cache has it."""

    def remove_pod(self, pod: Pod) -> None:
        """Take a placed pod off its node in the snapshot."""
        ...

    def add_pod(self, pod: Pod) -> None:
        """Put a pod back on ``pod.node_name`` in the snapshot."""
        ...

    def schedule(self) -> tuple[list[ProposedAssignment], Status | None]:
        """The whole-group placement on the snapshot as it is now, every member in order (its own
        placements undone before it returns); the status is the group's."""
        ...

    def assume(self, assignment: ProposedAssignment) -> Status | None:
        """Place a member on its proposed node in the snapshot and run Reserve for it; Reserve's
        status (the caller undoes a failed one with :meth:`forget`)."""
        ...

    def forget(self, assignment: ProposedAssignment) -> None:
        """Undo :meth:`assume`."""
        ...


@runtime_checkable
class PodGroupPostFilterPlugin(Protocol):
    """Runs when a pod group's cycle found no placement (DynamicResources' deallocation, then
    DefaultPreemption's workload-aware preemption). ``state`` is the group's cycle state (what its
    members' plugins wrote there); ``members`` are the group's unscheduled pods in this cycle."""

    name: str

    def pod_group_post_filter(
        self, state: CycleState, group: PodGroup, members: Sequence[Pod], simulation: PodGroupSimulation
    ) -> tuple[PodGroupPostFilterResult | None, Status | None]: ...


# (key, value) pairs a plugin contributes to a pod's scheduling signature.
SignFragments = Sequence[tuple[str, Any]]


@runtime_checkable
class SignPlugin(Protocol):
    """OpportunisticBatching's ``Sign`` point: what of the pod decides this plugin's Filter and
    Score. Two pods with equal fragments from every plugin get the same results on the same nodes.
    A non-success status means the pod cannot be signed (then it is never batched)."""

    name: str

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]: ...


class PlacementGeneratePlugin(Protocol):
    """The reference's PlacementGenerate point (a profile may name it; nothing here runs it yet)."""

    name: str

    def generate_placements(self, *args: Any) -> Any: ...


class PlacementScorePlugin(Protocol):
    """The reference's PlacementScore point (a profile may name it; nothing here runs it yet)."""

    name: str

    def score_placement(self, *args: Any) -> Any: ...


# --- what the registry checks and the framework resolves -----------------------------------------

# The profile API's extension points (``plugins.<point>``), each the protocol a plugin enabled
# there must implement; getExtensionPoints' order, then the pod group points.
EXTENSION_POINT_PROTOCOLS: dict[str, type] = {
    "preEnqueue": PreEnqueuePlugin,
    "queueSort": QueueSortPlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "preScore": PreScorePlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "preBind": PreBindPlugin,
    "bind": BindPlugin,
    "postBind": PostBindPlugin,
    "placementGenerate": PlacementGeneratePlugin,
    "placementScore": PlacementScorePlugin,
    "podGroupPostFilter": PodGroupPostFilterPlugin,
}

# The other capabilities, each with the extension point it extends (None: a capability of its
# own, taken part in by every enabled plugin that has it).
CAPABILITIES: dict[type, type | None] = {
    PreFilterExtensions: PreFilterPlugin,
    VectorFilter: FilterPlugin,
    FilterStatuses: FilterPlugin,
    PostFilterWithExtenders: PostFilterPlugin,
    AsyncPreemptionPlugin: PostFilterPlugin,
    ScoreExtensions: ScorePlugin,
    VectorScore: ScorePlugin,
    PreBindPreFlightPlugin: PreBindPlugin,
    AsyncPodGroupPreemptionPlugin: PodGroupPostFilterPlugin,
    EnqueueExtensions: None,
    SignPlugin: None,
    PlacementFeasiblePlugin: None,
    PreEnqueueSharedVerdict: PreEnqueuePlugin,
    PreQueueingHints: None,
}


@functools.cache  # protocols are fixed at import; asked ~1,500 times building the default engine
def protocol_methods(protocol: type) -> tuple[str, ...]:
    """The methods a protocol declares in its own body (its ``name`` attribute aside)."""
    return tuple(k for k, v in vars(protocol).items() if not k.startswith("_") and callable(v))


def _is_protocol(cls: type) -> bool:
    return bool(cls.__dict__.get("_is_protocol", False))


def implements(cls: type, protocol: type) -> bool:
    """``cls`` defines every method of ``protocol`` (a protocol's own stub, inherited by declaring
    it, does not count)."""
    return all(_implemented(cls, m) for m in protocol_methods(protocol))


def _implemented(cls: type, method: str) -> bool:
    for klass in cls.__mro__:
        if method in klass.__dict__:
            return callable(klass.__dict__[method]) and not _is_protocol(klass)
    return False
