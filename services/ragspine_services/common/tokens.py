"""The token estimate both tiers size batches with: the front splits what it sends by it, the worker's
batcher merges requests by it, so a batch the front builds never exceeds the worker's limit."""

from __future__ import annotations

__all__ = ["approx_tokens"]


def approx_tokens(text: str) -> int:
    """Cheap token estimate (whitespace words, and at least chars/4 for scripts without spaces)."""
    return max(1, len(text.split()), len(text) // 4)
