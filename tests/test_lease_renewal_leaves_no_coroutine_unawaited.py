"""Under load, a run can end in the very loop iteration in which its lease-renewal timer fired:
the renewal task is cancelled before it ever ran. That must leave no coroutine "never awaited"
(a RuntimeWarning on the operator's stderr), whatever the interleaving."""

from __future__ import annotations

import asyncio
import gc
import time
import warnings

import pytest

from anfitrion._host import _lease_kept
from anfitrion._runtime import Runtime


@pytest.mark.parametrize("yields", [1, 2, 3, 4])
def test_a_run_ending_as_its_renewal_starts_leaves_nothing_unawaited(yields: int) -> None:
    async def run() -> None:
        runtime = Runtime(lease_seconds=0.003)
        gated = await runtime.open("alice")
        with _lease_kept(gated):
            time.sleep(0.01)  # the loop is busy (load): the timer is due when it next runs
            for _ in range(yields):
                await asyncio.sleep(0)
        await asyncio.sleep(0)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(run())
        gc.collect()
    never = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert never == []
