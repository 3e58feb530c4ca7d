"""Which language a query is written in, as far as choosing retrieval channels needs to know.

Models declare what they read through an optional ``languages`` attribute (a set of codes such as
``{"en"}``; absent or ``None`` means any language). A channel whose model cannot read the query's
language is skipped for that query instead of fusing noise into the ranking: the packaged MiniLM and
SPLADE-tiny models are English-only, and an English model's ranking of a Chinese query is close to random.
"""

from __future__ import annotations

import re

from ragspine.retrieval.text.tokenizer import CJK_CLASS

_CJK_CHAR = re.compile(f"[{CJK_CLASS}]")
_ASCII_WORD = re.compile("[A-Za-z]+")


def query_language(text: str) -> str:
    """``"zh"`` when CJK ideographs outnumber ASCII words in ``text``, else ``"en"``.

    One ideograph counts like one word, so a Chinese question with an English product name stays "zh"
    and an English question quoting one Chinese term stays "en".
    """
    cjk = len(_CJK_CHAR.findall(text))
    words = len(_ASCII_WORD.findall(text))
    return "zh" if cjk > words else "en"


def reads_language(model: object, language: str) -> bool:
    """True unless ``model`` declares ``languages`` and ``language`` is not among them."""
    languages = getattr(model, "languages", None)
    return languages is None or language in languages
