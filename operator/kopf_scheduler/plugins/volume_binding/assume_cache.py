"""An overlay of assumed PV/PVC versions over ``handle.objects`` (``assume_cache.go``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from kopf_scheduler.api.kinds import HasMeta, Kind, objects_of

V = TypeVar("V", bound=HasMeta)


class AssumeCache(Generic[V]):
    """Assumed versions of PVs or PVCs laid over ``handle.objects[kind]`` (``assume_cache.go``).

    An assumed object hides the informer's object until the informer delivers a different
    resourceVersion (the API write has been observed) or the assumption is restored.
    """

    def __init__(self, kind: Kind[V]) -> None:
        self.kind = kind
        self._assumed: dict[str, tuple[str, V]] = {}

    def get(self, objects: Mapping[str, Mapping[str, object]], key: str) -> V | None:
        real = objects_of(objects, self.kind).get(key)
        entry = self._assumed.get(key)
        if entry is None:
            return real
        if real is not None and real.metadata.resource_version == entry[0]:
            return entry[1]
        self._assumed.pop(key, None)
        return real

    def items(self, objects: Mapping[str, Mapping[str, object]]) -> Iterator[tuple[str, V]]:
        store = objects_of(objects, self.kind)
        # Objects deleted while assumed: ``get`` would drop them, but nothing asks for them again.
        for key in [k for k in self._assumed if k not in store]:
            del self._assumed[key]
        for key in list(store):
            obj = self.get(objects, key)
            if obj is not None:
                yield key, obj

    def assume(self, key: str, base: V, new: V) -> None:
        self._assumed[key] = (base.metadata.resource_version, new)

    def restore(self, key: str) -> None:
        self._assumed.pop(key, None)

    def is_assumed(self, key: str) -> bool:
        return key in self._assumed
