"""Requests sent as another local user (uid 65534, nobody), who reaches loopback as any user does.

The requests run in /usr/bin/python3 (stdlib only: a venv under /root is not theirs to run) after
setgid/setuid in the child, so the test process itself must be root; elsewhere the test skips.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"

_SEND = """
import json, sys, urllib.error, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
out = []
for method, url, headers, body in json.load(sys.stdin):
    data = body.encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with opener.open(req, timeout=20) as resp:
            out.append(resp.status)
    except urllib.error.HTTPError as e:
        out.append(e.code)
    except OSError as e:
        out.append(str(e))
json.dump(out, sys.stdout)
"""


def _become_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def require_other_user() -> None:
    if os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip("another local user needs root (setuid) and /usr/bin/python3")


def send_as_other_user(requests: list[tuple[str, str, dict[str, str], str | None]]) -> list[Any]:
    """Each (method, url, headers, body) sent as uid 65534; its HTTP status (or the error's text)."""
    require_other_user()
    done = subprocess.run(
        [SYSTEM_PYTHON, "-c", _SEND],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_become_nobody,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    statuses: list[Any] = json.loads(done.stdout)
    return statuses


def can_read_as_other_user(path: str) -> bool:
    require_other_user()
    done = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; open(sys.argv[1]).read()", path],
        capture_output=True,
        timeout=60,
        preexec_fn=_become_nobody,
        cwd="/",
    )
    return done.returncode == 0
