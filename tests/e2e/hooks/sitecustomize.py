"""Fault injection for end-to-end tests, kept out of the operator's code.

An operator process started with this directory on PYTHONPATH imports this module at startup
(Python's `sitecustomize` hook) and, depending on the environment, replaces one method:

- GPURS_E2E_CRASH_AT=intent: exit (code 17, no cleanup, as after SIGKILL) at the first workload
  write, i.e. right after a change's intent was recorded;
- GPURS_E2E_CRASH_AT=rollback: exit the same way right after a rollback's intent was recorded;
- GPURS_E2E_RENEW_DELAY=<seconds>: once the lease is held, every renewal first stalls this long
  (an API server or node that has become slow for this one process).
"""

from __future__ import annotations

import os
import time
from typing import Any

CRASH_CODE = 17


def _install() -> None:
    crash_at = os.environ.get("GPURS_E2E_CRASH_AT")
    delay = float(os.environ.get("GPURS_E2E_RENEW_DELAY") or 0)
    if not crash_at and not delay:
        return
    from gpu_rightsizer.actuator.writes import ChangeWriter as Actuator
    from gpu_rightsizer.adapters.kube import LeaseElector

    def crash(*_: Any, **__: Any) -> None:
        print(f"fault injection: exiting at {crash_at}", flush=True)
        os._exit(CRASH_CODE)

    if crash_at == "intent":
        Actuator._patch_workload = crash  # type: ignore[method-assign,assignment]
    elif crash_at == "rollback":
        Actuator._finish_rollback = crash  # type: ignore[method-assign,assignment]
    if delay:
        original = LeaseElector.try_acquire

        def slow_renewal(self: LeaseElector) -> bool:
            if self._renewed_at is not None:
                print(f"fault injection: renewal stalls {delay:.0f} s", flush=True)
                time.sleep(delay)
            return original(self)

        LeaseElector.try_acquire = slow_renewal  # type: ignore[method-assign]


_install()
