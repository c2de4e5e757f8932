"""Exit 0 if pip's package index answers, else print one line saying so and exit 1.

``make install`` runs it after a failed ``pip install``, so that a missing network is said in one line instead of
only pip's resolver error. Standard library only. The index is pip's own setting: ``PIP_INDEX_URL``, else
``pip config get global.index-url``, else https://pypi.org/simple/. Installs without an index (``PIP_NO_INDEX``)
are not probed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 10.0


def index_url() -> str:
    url = os.environ.get("PIP_INDEX_URL")
    if url:
        return url
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "https://pypi.org/simple/"


def main() -> int:
    if os.environ.get("PIP_NO_INDEX"):
        return 0
    url = index_url()
    probe = url.rstrip("/") + "/pip/"  # a project page every index serves (a proxy may answer for a dead host)
    try:
        with urllib.request.urlopen(probe, timeout=TIMEOUT_S):
            return 0
    except (urllib.error.URLError, OSError, ValueError) as exc:  # HTTPError included: no usable answer
        reason = getattr(exc, "reason", exc)
        sys.stderr.write(
            f"make: cannot reach the package index {url} ({reason}): no network? Connect, or set "
            "PIP_INDEX_URL to a reachable mirror, then run make again\n"
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
