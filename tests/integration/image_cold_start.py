"""Cold start of a built image: ``podman run`` to a ready ``/readyz``, as test_image runs the container.

    python3 -m tests.integration.image_cold_start [IMAGE] [RUNS]

One local control plane, the manifests applied and their ServiceAccount's token mounted as the
kubelet mounts it (test_image's ``service_account`` fixture); then RUNS containers one after another
with the Deployment's args, env, user and read-only root (test_image's ``Container``), each timed
from just before ``podman run --detach`` until its readiness probe (HTTPS ``/readyz``) answers 200,
polled every 50 ms. Prints each run and the median. docs/benchmarks.md records the figures.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kopf_scheduler_workbench.controlplane import running_control_plane

from . import test_image
from .test_operator_helpers import deploy


def main(argv: list[str]) -> int:
    image = argv[0] if argv else test_image.IMAGE
    runs = int(argv[1]) if len(argv) > 1 else 5
    test_image.IMAGE = image  # Container runs the module's IMAGE
    size = test_image._podman("image", "inspect", "--format", "{{.Size}}", image).stdout.strip()
    with running_control_plane() as plane, tempfile.TemporaryDirectory() as tmp:
        deploy(plane)
        sa_dir = Path(tmp) / "serviceaccount"
        sa_dir.mkdir(mode=0o755)
        token = plane.kubectl("create", "token", "kopf-scheduler", "-n", "kopf-scheduler", "--duration=1h")
        (sa_dir / "token").write_text(token.strip())
        (sa_dir / "ca.crt").write_bytes(plane.ca_pem)
        (sa_dir / "namespace").write_text("kopf-scheduler")
        for f in sa_dir.iterdir():
            f.chmod(0o644)
        Path(tmp).chmod(0o755)
        seconds: list[float] = []
        for _ in range(runs):
            started = time.monotonic()
            c = test_image.Container(plane, sa_dir, f"kopf-scheduler-cold-{uuid.uuid4().hex[:6]}")
            try:
                while not c.probe("readinessProbe"):
                    if time.monotonic() - started > 90:
                        raise TimeoutError(c.logs())
                    time.sleep(0.05)
                seconds.append(time.monotonic() - started)
            finally:
                c.remove()
            print(f"{image}: ready in {seconds[-1]:.2f} s", flush=True)
    print(
        f"{image}: {int(size) / 1e6:.0f} MB, podman run to /readyz median {statistics.median(seconds):.2f} s "
        f"over {runs} (min {min(seconds):.2f}, max {max(seconds):.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
