"""The processes the workbench starts (control plane, schedulers under test): ports, lifetimes, stops.

One place for what the control plane, ``bench``, ``soak`` and ``fidelity`` all do to a child, so
none of them reaches into another's private helpers.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess

__all__ = ["die_with_parent", "free_port", "stop_group"]

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 free right now (the child binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGKILL when its parent dies, and leads its own process group
    (so :func:`stop_group` reaches a wrapper such as py-spy and the scheduler it runs)."""
    os.setpgid(0, 0)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def stop_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
    """Signal the child's process group, wait, SIGKILL it if it outlives ``timeout``."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
