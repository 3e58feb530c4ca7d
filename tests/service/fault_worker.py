"""A model worker process whose embedding takes as long as a control file says (for fault tests).

Run: ``python -m tests.service.fault_worker PORT DELAY_FILE``. Every embedding call first sleeps the
number of seconds written in ``DELAY_FILE`` (0 or a missing file: no delay), so a test can make the worker
slow and healthy again while it runs; SIGSTOP / SIGCONT / kill act on the real process.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ragspine_services.worker.models import ModelFactories, ModelRegistry
from ragspine_services.worker.server import start_worker


class DelayedEmbedding:
    """Bag-of-letters vectors after a delay read from a file."""

    def __init__(self, delay_file: Path) -> None:
        self.delay_file = delay_file

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        try:
            delay = float(self.delay_file.read_text() or 0)
        except (OSError, ValueError):
            delay = 0.0
        if delay > 0:
            time.sleep(delay)
        return [[float(t.lower().count(c)) + 0.01 for c in "aeiounst"] for t in texts]


def main() -> None:
    port, delay_file = int(sys.argv[1]), Path(sys.argv[2])
    embedding = DelayedEmbedding(delay_file)
    registry = ModelRegistry(
        embedding_spec="delayed", factories=ModelFactories(embedding=lambda spec: embedding)
    )
    running = start_worker(registry, port=port, token="svc-token")
    running.wait_for_signal(0.5)


if __name__ == "__main__":
    main()
