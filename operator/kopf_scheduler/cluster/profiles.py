"""Live reconciliation of SchedulerProfile resources into the running scheduler's ProfileSet.

A valid spec replaces that schedulerName's framework at the next cycle (``ProfileSet.set``); an
invalid edit is reported as ``Ready=False`` naming the field while the last valid version stays in
force (``status.activeGeneration`` tells which); deleting the resource removes the profile, or
restores what was there before it: the ``run --config`` file's profile of that name, or the
built-in default for ``kopf-scheduler``. Two resources claiming one schedulerName: the
older keeps it, the newer is ``Ready=False`` (``Conflict``).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kopf_scheduler.config.profile import DEFAULT_SCHEDULER_NAME, ProfileError, SchedulerProfileSpec
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.plugins.node_resources_fit import NodeResourcesFitArgs

__all__ = ["ProfileController", "ProfileTarget", "score_strategy"]

logger = logging.getLogger(__name__)


class ProfileTarget(Protocol):
    """What the controller drives: ``scheduler.ProfileSet``'s ``set``/``remove``/``names``."""

    def set(self, spec: SchedulerProfileSpec) -> Any: ...

    def remove(self, name: str) -> None: ...

    def names(self) -> list[str]: ...


StatusWriter = Callable[[str, dict[str, Any]], Awaitable[None]]


def score_strategy(profile: SchedulerProfileSpec) -> str:
    """The NodeResourcesFit scoring strategy in force ("" when the plugin is not scoring)."""
    resolved = profile.resolved
    if resolved is None or "NodeResourcesFit" not in resolved.points.get("score", []):
        return ""
    args = resolved.args.get("NodeResourcesFit")
    if not isinstance(args, NodeResourcesFitArgs):  # an out-of-tree plugin under the name
        return "LeastAllocated"
    return args.scoring_strategy.type or "LeastAllocated"


def _field_errors(exc: ProfileError) -> str:
    """``spec.<field>: <message>`` for each error: the condition must name the field to fix."""
    out = []
    for path, msg in exc.errors:
        msg = msg.removeprefix("Value error, ")
        head, sep, rest = msg.partition(": ")
        if sep and path and " " not in head:  # the plugin's validator named a sub-field: join the paths
            path, msg = f"{path}.{head}", rest
        out.append(f"spec.{path}: {msg}" if path else msg)
    return "; ".join(out)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Owned:
    scheduler_name: str
    generation: int
    created: str


class ProfileController:
    """Turns SchedulerProfile events into ProfileSet changes and status writes."""

    def __init__(
        self,
        profiles: ProfileTarget,
        write_status: StatusWriter,
        on_names_changed: Callable[[set[str], set[str]], None] = lambda added, removed: None,
        base: Mapping[str, SchedulerProfileSpec] | None = None,
    ) -> None:
        self.profiles = profiles
        self.write_status = write_status
        self.on_names_changed = on_names_changed
        # The profiles of `run --config`'s file: a resource with the same schedulerName replaces one
        # while it exists; when it goes, the file's profile is back.
        self.base: dict[str, SchedulerProfileSpec] = dict(base or {})
        self.owned: dict[str, _Owned] = {}  # resource name -> the profile it has in force

    def _owner_of(self, scheduler_name: str) -> str | None:
        for name, owned in self.owned.items():
            if owned.scheduler_name == scheduler_name:
                return name
        return None

    def _drop(self, name: str) -> str | None:
        owned = self.owned.pop(name, None)
        if owned is None:
            return None
        base = self.base.get(owned.scheduler_name)
        if base is not None:
            self.profiles.set(base)
        else:
            self.profiles.remove(owned.scheduler_name)  # ProfileSet restores the default for kopf-scheduler
        return owned.scheduler_name

    def _notify(self, before: set[str]) -> None:
        after = set(self.profiles.names())
        if after != before:
            self.on_names_changed(after - before, before - after)

    async def apply(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Reconcile one resource (created, edited or re-listed); return the status written."""
        meta = body.get("metadata") or {}
        name = str(meta.get("name"))
        generation = int(meta.get("generation") or 0)
        created = str(meta.get("creationTimestamp") or "")
        old_status = dict(body.get("status") or {})
        before = set(self.profiles.names())
        status: dict[str, Any] = {"observedGeneration": generation}
        try:
            profile = load_profile(body.get("spec") or {})
        except ProfileError as exc:
            ready = ("False", "InvalidProfile", _field_errors(exc))
            # Keep the last valid version in force: no change to the ProfileSet.
            kept = self.owned.get(name)
            status["activeGeneration"] = kept.generation if kept else None
            status["scoreStrategy"] = old_status.get("scoreStrategy") if kept else None
            logger.warning("SchedulerProfile %s generation %d is invalid: %s", name, generation, exc)
        else:
            owner = self._owner_of(profile.scheduler_name)
            if owner is not None and owner != name and self.owned[owner].created <= created:
                kept = self.owned.get(name)
                status["activeGeneration"] = kept.generation if kept else None
                status["scoreStrategy"] = old_status.get("scoreStrategy") if kept else None
                ready = (
                    "False",
                    "Conflict",
                    f"spec.schedulerName: {profile.scheduler_name!r} is already served by SchedulerProfile "
                    f"{owner!r}",
                )
            else:
                if owner is not None and owner != name:  # we are older: take the name over
                    self.owned.pop(owner)
                previous = self.owned.get(name)
                if previous is not None and previous.scheduler_name != profile.scheduler_name:
                    self._drop(name)  # renamed: the old schedulerName is no longer served
                self.profiles.set(profile)
                self.owned[name] = _Owned(profile.scheduler_name, generation, created)
                status["activeGeneration"] = generation
                status["scoreStrategy"] = score_strategy(profile)
                ready = ("True", "Active", f"scheduling pods with schedulerName {profile.scheduler_name!r}")
                logger.info("SchedulerProfile %s generation %d in force", name, generation)
        self._notify(before)
        status["conditions"] = [self._condition(old_status, generation, *ready)]
        if {k: v for k, v in old_status.items() if k in status} != status:
            await self.write_status(name, status)
        return status

    @staticmethod
    def _condition(
        old_status: Mapping[str, Any], generation: int, state: str, reason: str, msg: str
    ) -> dict[str, Any]:
        old = next((c for c in old_status.get("conditions") or () if c.get("type") == "Ready"), None)
        since = old.get("lastTransitionTime") if old and old.get("status") == state else _now()
        return {
            "type": "Ready",
            "status": state,
            "reason": reason,
            "message": msg,
            "observedGeneration": generation,
            "lastTransitionTime": since,
        }

    def delete(self, body: Mapping[str, Any]) -> None:
        name = str((body.get("metadata") or {}).get("name"))
        before = set(self.profiles.names())
        dropped = self._drop(name)
        if dropped is not None:
            logger.info("SchedulerProfile %s deleted: %s no longer served by it", name, dropped)
        self._notify(before)

    async def resync(self, items: Sequence[Mapping[str, Any]]) -> None:
        """After a full listing (start, leadership acquired): drop vanished resources, apply the rest.

        Oldest first, so a schedulerName conflict resolves the same way in every replica.
        """
        present = {str((i.get("metadata") or {}).get("name")) for i in items}
        for name in [n for n in self.owned if n not in present]:
            self.delete({"metadata": {"name": name}})

        def created(item: Mapping[str, Any]) -> str:
            return str((item.get("metadata") or {}).get("creationTimestamp") or "")

        for item in sorted(items, key=created):
            await self.apply(item)


def default_is_served(profiles: ProfileTarget) -> bool:
    return DEFAULT_SCHEDULER_NAME in profiles.names()
