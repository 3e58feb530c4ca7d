"""The size check every batched RPC makes first: not empty, not over the published limit."""

from __future__ import annotations

from collections.abc import Sized

from ragspine_services.common.errors import RequestTooLargeError


def check_batch_size(items: Sized, limit: int, what: str, *, one: str = "", split: str = "") -> None:
    """``ValueError`` (INVALID_ARGUMENT) when ``items`` is empty: "``what`` is empty: send at least one
    ``one``"; ``RequestTooLargeError`` (RESOURCE_EXHAUSTED) when it holds more than ``limit``: "N ``what``
    in one request; the limit is ``limit``", then ": ``split``" (what to do instead) when given."""
    if not len(items):
        raise ValueError(f"{what} is empty: send at least one{' ' + one if one else ''}")
    if len(items) > limit:
        advice = f": {split}" if split else ""
        raise RequestTooLargeError(f"{len(items)} {what} in one request; the limit is {limit}{advice}")
