"""Shared fixtures. ``control_plane`` is a real etcd + kube-apiserver on loopback, one per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kopf_scheduler.cluster.controlplane import ControlPlane


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane()
    try:
        plane.start()
    except BaseException:
        plane.stop()
        raise
    try:
        yield plane
    finally:
        plane.stop()
