"""The lexical tokenizer: lowercase ASCII words plus CJK unigrams and adjacent bigrams.

CJK runs have no spaces, so instead of a segmenter every ideograph becomes a token on its own and every
pair of neighbouring ideographs becomes one more; BM25 then rewards documents that share the query's
two-character words without any dictionary. The ideograph ranges recognised are:

- U+4E00–U+9FFF  CJK Unified Ideographs (the common Chinese, Japanese kanji and Korean hanja block)
- U+3400–U+4DBF  CJK Unified Ideographs Extension A (rarer characters, many names)
- U+F900–U+FAFF  CJK Compatibility Ideographs

Everything else — punctuation, whitespace, full-width forms (``ＡＢＣ１２３``, ``，。``), kana, hangul,
accented Latin letters, emoji — only separates tokens and never becomes one.
"""

from __future__ import annotations

import re
from operator import add

CJK_CLASS = "\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff"
# One alternation keeps the tokens in text order: an ASCII word or a run of ideographs.
_TOKEN_RE = re.compile(f"[A-Za-z0-9]+|[{CJK_CLASS}]+")
_ASCII_WORD_RE = re.compile("[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Split ``text`` into BM25 tokens.

    ASCII letters and digits form words, lowercased (only ASCII is folded: ``"ＡＢＣ"`` and ``"é"`` are
    separators). Each maximal run of CJK ideographs contributes all its single characters in order, then
    all its adjacent two-character pairs in order (a one-character run gives just the unigram). Every
    other character separates tokens. An empty or token-free text gives ``[]``.

    Raises ``ValueError`` when ``text`` is not a ``str`` (bytes must be decoded first).
    """
    if not isinstance(text, str):
        raise ValueError(f"tokenize expects str, got {type(text).__name__}; decode bytes first")
    if text.isascii():
        # Fast path for English: lowercasing pure ASCII cannot create or remove token characters.
        return _ASCII_WORD_RE.findall(text.lower())
    tokens: list[str] = []
    extend = tokens.extend
    append = tokens.append
    for run in _TOKEN_RE.findall(text):
        if run.isascii():
            append(run.lower())
        else:
            extend(run)  # unigrams, one per ideograph
            if len(run) > 1:
                extend(map(add, run, run[1:]))  # adjacent bigrams
    return tokens
