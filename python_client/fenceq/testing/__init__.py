"""Testing an App's tasks (docs/testing-your-tasks.md): ``InlineMode(app)``,
``MemoryMode(app)`` and ``DatabaseMode(app, url)`` open a mode that takes over the
App's submissions for a block; the pytest plugin
(``fenceq.testing.pytest_plugin``, loaded by pytest through its entry
point) gives them as fixtures. ``MemoryBackend`` and ``ManualClock`` are
the in-memory backend and the clock the in-process modes run on."""

from .backend import MemoryBackend
from .clock import ManualClock
from .modes import DatabaseMode, InlineMode, MemoryMode

__all__ = ["DatabaseMode", "InlineMode", "ManualClock", "MemoryBackend", "MemoryMode"]
