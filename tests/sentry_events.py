"""A Sentry transport that hands each event to the test instead of the network."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

#: A DSN that names no server: with ``EventSink`` as the transport nothing is sent anywhere.
DSN = "https://public@example.invalid/1"

#: An event as the SDK would send it (JSON).
Event = dict[str, Any]


class EventSink(Transport):
    """Calls ``sink`` with each error event, synchronously, in the capturing thread."""

    def __init__(self, sink: Callable[[Event], object]) -> None:
        super().__init__()
        self.sink = sink

    def capture_envelope(self, envelope: Envelope) -> None:
        event = envelope.get_event()
        if event is not None:
            self.sink(dict(event))


class EventFile:
    """Appends each event to a file, one JSON object a line (a worker subprocess's sink)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        with self._lock, self.path.open("a") as events:
            events.write(json.dumps(event) + "\n")

    def read(self) -> list[Event]:
        """The events written so far, in order."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]
