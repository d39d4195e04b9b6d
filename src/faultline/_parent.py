"""Child processes that end when the process that started them dies (Linux).

A supervisor killed by SIGKILL cannot stop its children (nats-server, the journal
service, the workers: each in a session of its own). The kernel can: each child asks
for SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG) and stops as on any SIGTERM
(a worker drains, the journal service writes what it holds). The kernel sends it when
the *thread* that started the child ends, so children are started from threads that
live as long as their process. Elsewhere than Linux nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
SUPERVISOR_ENV = "FAULTLINE_SUPERVISOR_PID"
"""Set by a supervisor for its Python children: the pid they end with."""

_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None  # loaded before any fork


def end_with(parent: int) -> None:
    """Receive SIGTERM when `parent` (this process's parent) dies; if it died already, now."""
    if _prctl is None:
        return
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # it died before the request was made
        os.kill(os.getpid(), signal.SIGTERM)


def ending_with_this_process() -> Callable[[], None] | None:
    """A `preexec_fn` for a child that is not Python (nats-server): it ends with this process."""
    if _prctl is None:
        return None
    parent = os.getpid()
    return lambda: end_with(parent)


def supervised_env() -> dict[str, str]:
    """The environment of a Python child that ends with this process (see `end_with_supervisor`)."""
    return {**os.environ, SUPERVISOR_ENV: str(os.getpid())}


def end_with_supervisor() -> None:
    """In a Python child a supervisor started: end with it. Its own children do not inherit the request."""
    parent = os.environ.pop(SUPERVISOR_ENV, "")
    if parent.isdigit():
        end_with(int(parent))
