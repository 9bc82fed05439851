"""The profiles a scheduler serves (the reference's ``profile.Map``): a framework per schedulerName,
built with the engine's services, the queue configured from them."""

from __future__ import annotations

from collections.abc import Iterable

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.config.profile import DEFAULT_SCHEDULER_NAME, SchedulerProfileSpec
from kopf_scheduler.framework.interface import PreEnqueuePlugin, PreQueueingHints
from kopf_scheduler.framework.profiles import default_profile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.runtime import Framework, FrameworkServices
from kopf_scheduler.queue.interface import HintsMap, SchedulingQueue

__all__ = ["ProfileSet"]


class ProfileSet:
    """Frameworks by schedulerName; a profile can be swapped or removed between cycles.

    Built with everything its frameworks need (``services``: their Handle) and the queue it
    configures (PreEnqueue plugins, queueing hints, QueueSort), as the reference's ``scheduler.New``
    builds ``profile.Map`` and the queue from it: a framework's handle is fixed at its
    construction, so nothing is handed to it afterwards. A profile set or rebuilt later (a
    SchedulerProfile edit) is built with the same services and reconfigures the same queue.

    Without any SchedulerProfile the default profile for ``kopf-scheduler`` exists; removing a
    custom ``kopf-scheduler`` profile restores that default.
    """

    def __init__(
        self,
        specs: Iterable[SchedulerProfileSpec],
        registry: Registry | None,
        *,
        services: FrameworkServices,
        queue: SchedulingQueue,
        with_default: bool = True,
    ) -> None:
        self.registry = registry
        self.services = services
        self.queue = queue
        self._with_default = with_default
        self.frameworks: dict[str, Framework] = {}
        specs = list(specs)
        if with_default and not any(s.scheduler_name == DEFAULT_SCHEDULER_NAME for s in specs):
            specs.insert(0, default_profile(DEFAULT_SCHEDULER_NAME, registry))
        for spec in specs:
            self.frameworks[spec.scheduler_name] = services.build(spec, registry)
        self._configure_queue()

    def set(self, spec: SchedulerProfileSpec) -> Framework:
        fw = self.services.build(spec, self.registry)
        old = self.frameworks.get(spec.scheduler_name)
        self.frameworks[spec.scheduler_name] = self._replacing(old, fw) if old is not None else fw
        self._configure_queue()
        return fw

    @staticmethod
    def _replacing(old: Framework, new: Framework) -> Framework:
        """``new`` takes over the pods waiting at Permit under ``old`` (their binding cycles still
        run with ``old``): a pod deleted meanwhile is still found and rejected, and the new
        profile's Permit plugins see them as the old one's did."""
        new.waiting_pods = old.waiting_pods
        return new

    def remove(self, name: str) -> None:
        old = self.frameworks.pop(name, None)
        if name == DEFAULT_SCHEDULER_NAME and self._with_default:
            fw = self.set(default_profile(DEFAULT_SCHEDULER_NAME, self.registry))
            if old is not None:
                self._replacing(old, fw)
        else:
            self._configure_queue()

    def get(self, name: str) -> Framework | None:
        return self.frameworks.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.frameworks

    def names(self) -> list[str]:
        return list(self.frameworks)

    def _configure_queue(self) -> None:
        queue = self.queue
        if not self.frameworks:
            return
        frameworks = self.frameworks
        hints = {name: fw.queueing_hints() for name, fw in frameworks.items()}

        def pre_enqueue(pod: Pod) -> list[PreEnqueuePlugin]:
            fw = frameworks.get(pod.scheduler_name)
            return fw.pre_enqueue_plugins if fw is not None else []

        def hints_for(pod: Pod) -> HintsMap:
            return hints.get(pod.scheduler_name, {})

        queue.set_pre_enqueue(pre_enqueue)
        # Every profile's map lets the queue skip events no plugin registered without walking its pool.
        queue.set_hints(hints_for, hints.values())
        pre_hints = {name: fw.pre_queueing_hints for name, fw in frameworks.items()}

        def pre_hints_for(pod: Pod) -> dict[str, PreQueueingHints]:
            return pre_hints.get(pod.scheduler_name, {})

        # Each profile's hints with its PreQueueingHints plugins: the same map objects as above.
        queue.set_pre_queueing_hints(pre_hints_for, [(hints[name], pre_hints[name]) for name in frameworks])
        first = next(iter(frameworks.values()))
        if first.queue_sort_plugins:
            queue.set_less(first.queue_sort_less())
