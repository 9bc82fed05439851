"""DRAExtendedResource: which DeviceClass an extended resource name stands for (the reference's
``extendedresourcecache``), so that a container's ``example.com/gpu: 1`` can be met by a device.

A class is named by ``deviceclass.resource.kubernetes.io/<class>`` always, and by its
``spec.extendedResourceName`` if set; when several classes give the same name, the newest one
(``creationTimestamp``; on a tie, the first name) stands for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the views' module is imported when such an object arrives
    from kopf_scheduler.api.resource import DeviceClass

__all__ = ["DEVICE_CLASS_PREFIX", "ExtendedResources", "is_dra_extended_resource_name"]

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
        self._seen: tuple[DeviceClass, ...] = ()
        self._by_name: dict[str, DeviceClass] = {}

    def classes(self, classes: Mapping[str, DeviceClass]) -> Mapping[str, DeviceClass]:
        current = tuple(classes.values())
        changed = len(current) != len(self._seen) or any(
            a is not b for a, b in zip(current, self._seen, strict=False)
        )
        if changed:
            self._seen = current
            self._by_name = _resolve(current)
        return self._by_name


def _resolve(classes: tuple[DeviceClass, ...]) -> dict[str, DeviceClass]:
    by_name: dict[str, DeviceClass] = {}
    chosen: dict[str, tuple[float, str]] = {}
    for cls in classes:
        name, created = cls.metadata.name, cls.metadata.creation_timestamp
        by_name[DEVICE_CLASS_PREFIX + name] = cls
        extended = cls.extended_resource_name
        if not extended:
            continue
        have = chosen.get(extended)
        if have is None or created > have[0] or (created == have[0] and name < have[1]):
            chosen[extended] = (created, name)
            by_name[extended] = cls
    return by_name
