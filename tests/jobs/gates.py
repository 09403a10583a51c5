"""Waiting in ``async def`` tasks for a test's gate (``tests.testapp.models.Gate``) to open."""

from __future__ import annotations

import asyncio

from tests.testapp.models import Gate


async def gate_opens(name: str, timeout: float, every: float) -> None:
    """Return once gate ``name`` is open, polling every ``every`` seconds.

    Raises ``TimeoutError`` when it stays closed for ``timeout`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await Gate.objects.filter(name=name, is_open=True).aexists():
        if loop.time() > deadline:
            raise TimeoutError(f"gate {name!r} stayed closed for {timeout}s")
        await asyncio.sleep(every)
