"""A client-go exec credential plugin for tests: what EKS/GKE/AKS kubeconfigs run, minus the cloud.

The plugin is a small script printing an ``ExecCredential`` whose token and lifetime are read from
files in a state directory, so a test can rotate the token, shorten its lifetime or make the plugin
fail, and count the plugin's runs (one line per run in ``calls``).
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

__all__ = ["ExecPlugin"]

_SCRIPT = """\
#!{python}
import datetime, json, os, pathlib, sys
state = pathlib.Path({state!r})
with open(state / "calls", "a") as calls:
    calls.write(os.environ.get("KUBERNETES_EXEC_INFO", "") + "\\n")
fail = state / "fail"
if fail.exists():
    sys.stderr.write(fail.read_text())
    sys.exit(1)
ttl = int((state / "ttl").read_text())
expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=ttl)
print(json.dumps({{
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {{
        "token": (state / "token").read_text().strip(),
        "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }},
}}))
"""


class ExecPlugin:
    """The plugin script in ``state`` and the knobs a test turns."""

    def __init__(self, state: Path, token: str, ttl: int = 3600) -> None:
        self.state = state
        state.mkdir(parents=True, exist_ok=True)
        self.script = state / "credential-plugin"
        self.script.write_text(_SCRIPT.format(python=sys.executable, state=str(state)))
        self.script.chmod(0o755)
        self.set(token, ttl)

    def set(self, token: str | None = None, ttl: int | None = None) -> None:
        if token is not None:
            (self.state / "token").write_text(token)
        if ttl is not None:
            (self.state / "ttl").write_text(str(ttl))

    def fail(self, message: str | None) -> None:
        """Make every following run exit 1 with ``message`` on stderr (None: succeed again)."""
        path = self.state / "fail"
        if message is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(message)

    @property
    def calls(self) -> int:
        path = self.state / "calls"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def kubeconfig(self, path: Path, server: str, ca_pem: bytes | None = None, **cluster: object) -> Path:
        """A kubeconfig whose only user is this plugin (``apiVersion`` v1, like current cloud CLIs)."""
        entry: dict[str, object] = {"server": server, **cluster}
        if ca_pem is not None:
            entry["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
        user = {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": str(self.script),
                "interactiveMode": "Never",
                "provideClusterInfo": False,
            }
        }
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": entry}],
            "users": [{"name": "exec-user", "user": user}],
            "contexts": [{"name": "exec", "context": {"cluster": "c", "user": "exec-user"}}],
            "current-context": "exec",
        }
        path.write_text(json.dumps(config, indent=2))
        return path
