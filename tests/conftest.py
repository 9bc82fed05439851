"""Shared fixtures. ``control_plane`` is a real etcd + kube-apiserver on loopback, one per session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from kopf_scheduler_workbench.controlplane import ControlPlane

# `kopf-scheduler run` serves HTTPS on 10259 by default, as kube-scheduler: the replicas the tests
# start (several at once, and other runs on the same machine) would all take it. They keep their own
# --metrics-port; a test that wants the secure port passes --secure-port.
os.environ.setdefault("KOPF_SCHEDULER_SECURE_PORT", "0")


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
