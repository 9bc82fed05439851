"""DRAExtendedResource: which DeviceClass an extended resource name stands for (the reference's
``extendedresourcecache``), so that a container's ``example.com/gpu: 1`` can be met by a device.

A class is named by ``deviceclass.resource.kubernetes.io/<class>`` always, and by its
``spec.extendedResourceName`` if set; when several classes give the same name, the newest one
(``creationTimestamp``; on a tie, the first name) stands for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kopf_scheduler.api.types import ObjectError, parse_timestamp

__all__ = ["DEVICE_CLASS_PREFIX", "EXTENDED_RESOURCES", "ExtendedResources", "is_dra_extended_resource_name"]

Raw = Mapping[str, Any]
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"


def is_dra_extended_resource_name(name: str) -> bool:
    """``IsDRAExtendedResourceName``: an extended resource (domain-qualified, outside
    ``kubernetes.io``, not a quota ``requests.`` name) or a device-class resource name."""
    if name.startswith(DEVICE_CLASS_PREFIX):
        return True
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


class ExtendedResources:
    """Resource name -> DeviceClass, recomputed only when a class object changed (identity)."""

    def __init__(self) -> None:
        self._seen: tuple[Raw, ...] = ()
        self._by_name: dict[str, Raw] = {}

    def classes(self, classes: Mapping[str, Raw]) -> Mapping[str, Raw]:
        current = tuple(classes.values())
        changed = len(current) != len(self._seen) or any(
            a is not b for a, b in zip(current, self._seen, strict=False)
        )
        if changed:
            self._seen = current
            self._by_name = _resolve(current)
        return self._by_name


def _resolve(classes: tuple[Raw, ...]) -> dict[str, Raw]:
    by_name: dict[str, Raw] = {}
    chosen: dict[str, tuple[float, str]] = {}
    for cls in classes:
        meta = cls.get("metadata") or {}
        name = str(meta.get("name", ""))
        by_name[DEVICE_CLASS_PREFIX + name] = cls
        extended = (cls.get("spec") or {}).get("extendedResourceName")
        if not extended:
            continue
        try:
            created = parse_timestamp(meta.get("creationTimestamp"))
        except ObjectError:
            created = 0.0
        have = chosen.get(extended)
        if have is None or created > have[0] or (created == have[0] and name < have[1]):
            chosen[extended] = (created, name)
            by_name[str(extended)] = cls
    return by_name


# The one resolver NodeResourcesFit and DynamicResources (of every profile) share: both ask it about
# the same DeviceClasses in a cycle, so the mapping is rebuilt once per change of a class, not per plugin.
EXTENDED_RESOURCES = ExtendedResources()
