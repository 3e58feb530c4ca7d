"""What a factory does with a choice it cannot honour: an unknown name, or one that needs what was not
given (an LLM provider, an embedder).

The published factories fall back (``make_query_transform`` returns its base retriever, ``make_decomposer``
None, ...) with a logged warning, so code written for the published package keeps running. This
service's own assembly runs them inside ``strict_choices()`` and gets the ``UnavailableChoice`` (a
``ValueError`` naming the choices), so a misspelt setting stops a server at start instead of switching a
stage off without a word.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

__all__ = ["UnavailableChoice", "base_retriever", "nothing", "published_fallback", "strict_choices"]

log = logging.getLogger("ragspine.choices")
_P = ParamSpec("_P")
_R = TypeVar("_R")
_STRICT: contextvars.ContextVar[bool] = contextvars.ContextVar("ragspine_strict_choices", default=False)


class UnavailableChoice(ValueError):
    """A factory was given a name it does not know, or a choice whose requirement is missing."""


@contextmanager
def strict_choices() -> Iterator[None]:
    """Inside this block the published factories raise ``UnavailableChoice`` instead of falling back."""
    token = _STRICT.set(True)
    try:
        yield
    finally:
        _STRICT.reset(token)


def published_fallback(
    fallback: Callable[..., Any], instead: str
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Make a strict factory behave as published: on ``UnavailableChoice`` log it with what is used
    ``instead`` and return ``fallback(*args, **kwargs)`` (raise it inside ``strict_choices()``)."""

    def decorate(strict: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(strict)
        def factory(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return strict(*args, **kwargs)
            except UnavailableChoice as exc:
                if _STRICT.get():
                    raise
                log.warning("%s; %s", exc, instead)
                chosen: _R = fallback(*args, **kwargs)
                return chosen

        return factory

    return decorate


def base_retriever(base: _R, *args: object, **kwargs: object) -> _R:
    """The fallback of a factory that wraps ``base``: ``base`` itself."""
    return base


def nothing(*args: object, **kwargs: object) -> None:
    """The fallback of a factory whose off value is None."""
    return None
