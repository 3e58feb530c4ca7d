"""Progress of a long CLI job: a bar on a terminal, a line every few seconds otherwise (logs, CI, pipes)."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, TextIO


class Progress:
    """Counts items; on a TTY draws a tqdm bar, elsewhere prints ``<desc>: N docs (R/s)`` every
    ``every_s`` seconds and once at the end. Use as a context manager."""

    def __init__(
        self, desc: str, *, stream: TextIO | None = None, every_s: float = 5.0, unit: str = "doc"
    ) -> None:
        self.desc = desc
        self.count = 0
        self._stream = stream or sys.stderr
        self._every_s = every_s
        self._unit = unit
        self._started = time.monotonic()
        self._last = self._started
        self._bar: Any = None
        if self._stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(unit=unit, desc=desc, file=self._stream)

    def update(self, n: int = 1) -> None:
        self.count += n
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last >= self._every_s:
            self._last = now
            self._line(now)

    def _line(self, now: float) -> None:
        rate = self.count / max(now - self._started, 1e-9)
        print(f"{self.desc}: {self.count} {self._unit}s ({rate:.1f}/s)", file=self._stream, flush=True)

    def close(self, *, failed: bool = False) -> None:
        """Finish the bar, or print the final count line (not when the job failed: the error says it)."""
        if self._bar is not None:
            self._bar.close()
        elif self.count and not failed:
            self._line(time.monotonic())

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(failed=exc is not None)
