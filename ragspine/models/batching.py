"""Token-budget batching: sort inputs by length, pack batches under a padded-token budget, restore order.

Sorting by length keeps padding low (each batch is padded to its longest member), and the budget bounds
memory: a batch never holds more than ``max_tokens`` padded tokens nor more than ``max_batch_size`` inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class BatchPolicy:
    """Limits on one forward pass: ``max_tokens`` padded tokens (batch size x longest input) and inputs.

    Raises ``ValueError`` when either limit is not a positive integer.
    """

    max_tokens: int = 16384
    max_batch_size: int = 64

    def __post_init__(self) -> None:
        if self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be a positive number of tokens, got {self.max_tokens}")
        if self.max_batch_size <= 0:
            raise ValueError(f"max_batch_size must be a positive number of inputs, got {self.max_batch_size}")


def plan_batches(lengths: Sequence[int], policy: BatchPolicy) -> list[list[int]]:
    """Group input positions into batches, longest inputs first.

    ``lengths`` are token counts after truncation. An input longer than the whole budget still gets a
    batch of its own (it cannot be split further here; truncation already bounded it).
    Returns lists of original positions; every position appears exactly once.
    """
    # Ties broken by position so the plan is deterministic.
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    widest = 0
    for i in order:
        width = max(widest, max(1, int(lengths[i])))
        if current and (
            len(current) + 1 > policy.max_batch_size or width * (len(current) + 1) > policy.max_tokens
        ):
            batches.append(current)
            current, width = [], max(1, int(lengths[i]))
        current.append(i)
        widest = width
    if current:
        batches.append(current)
    return batches


def run_batched(
    lengths: Sequence[int], policy: BatchPolicy, run: Callable[[list[int]], Sequence[T]]
) -> list[T]:
    """Call ``run(positions)`` per planned batch and return its outputs in the caller's original order.

    ``run`` must return one output per position it was given; otherwise ``RuntimeError`` is raised.
    """
    out: list[T | None] = [None] * len(lengths)
    for batch in plan_batches(lengths, policy):
        results = run(batch)
        if len(results) != len(batch):
            raise RuntimeError(f"batch of {len(batch)} inputs produced {len(results)} outputs")
        for position, result in zip(batch, results, strict=True):
            out[position] = result
    return out  # type: ignore[return-value]  # every slot was filled above
