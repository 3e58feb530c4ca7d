"""Behaviour of ``chunk_document``: packing, overlap, sentence splits, locators, validation."""

from __future__ import annotations

import inspect
import itertools
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragspine.retrieval.chunking.chunking import (
    DEFAULT_CHUNK_CHARS,
    DEFAULT_OVERLAP_CHARS,
    Chunk,
    DocumentMeta,
    chunk_document,
)
from ragspine.retrieval.chunking.types import para_locator
from ragspine.retrieval.constants import DEFAULT_CHUNK_CHARS as CONST_CHUNK
from ragspine.retrieval.constants import DEFAULT_OVERLAP_CHARS as CONST_OVERLAP

META = DocumentMeta(doc_id="doc-1")
ENDERS = "。！？；.!?;"


# ----------------------------------------------------------------------------- reference helpers


def reference_paragraphs(text: str) -> list[tuple[int, int]]:
    """Paragraph spans by the spec's definition (the stripped non-blank lines), independent of the chunker."""
    spans: list[tuple[int, int]] = []
    offset = 0
    for line in text.split("\n"):
        if line.strip():
            spans.append((offset + len(line) - len(line.lstrip()), offset + len(line.rstrip())))
        offset += len(line) + 1
    return spans


def expected_locator(c: Chunk) -> str:
    if c.para_start == c.para_end:
        return f"#para{c.para_start}"
    return f"#para{c.para_start}-{c.para_end}"


def non_space(s: str) -> int:
    return sum(1 for ch in s if not ch.isspace())


def assert_chunks_honest(source: str, chunks: list[Chunk], max_chars: int, overlap_chars: int) -> None:
    """Every promise a caller relies on: contiguous substrings, budgets, coverage, overlap rules."""
    paras = reference_paragraphs(source)
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert [c.chunk_id for c in chunks] == [f"{c.doc_id}#c{c.seq}" for c in chunks]
    covered: set[int] = set()
    oversized_pieces: dict[int, list[str]] = {}
    is_piece: list[bool] = []
    for c in chunks:
        assert 1 <= c.para_start <= c.para_end <= len(paras)
        assert c.source_locator.endswith(expected_locator(c))
        assert 0 < len(c.text) <= max_chars
        assert c.text == c.text.strip()
        start, end = paras[c.para_start - 1][0], paras[c.para_end - 1][1]
        is_piece.append(c.para_start == c.para_end and end - start > max_chars)
        if not is_piece[-1]:
            assert c.text == source[start:end]
        else:
            assert c.text in source[start:end]
            oversized_pieces.setdefault(c.para_start, []).append(c.text)
        covered.update(range(c.para_start, c.para_end + 1))
    assert covered == set(range(1, len(paras) + 1))
    for para, pieces in oversized_pieces.items():
        # Sub-chunks of a long paragraph neither overlap nor drop anything but whitespace.
        ps, pe = paras[para - 1]
        assert sum(non_space(p) for p in pieces) == non_space(source[ps:pe])
    for k in range(1, len(chunks)):
        prev, nxt = chunks[k - 1], chunks[k]
        if is_piece[k - 1] or is_piece[k]:
            # No overlap into, out of, or between the pieces of a long paragraph.
            assert nxt.para_start == prev.para_end + 1 or (is_piece[k - 1] and is_piece[k])
            assert nxt.para_start >= prev.para_end
            continue
        assert prev.para_start < nxt.para_start <= prev.para_end + 1
        # Greedy packing: the previous chunk stopped because the next paragraph did not fit.
        assert paras[prev.para_end][1] - paras[prev.para_start - 1][0] > max_chars
        if nxt.para_start <= prev.para_end:
            carried = source[paras[nxt.para_start - 1][0] : paras[prev.para_end - 1][1]]
            assert len(carried) <= overlap_chars


# ----------------------------------------------------------------------------- defaults and shapes


def test_defaults_are_the_published_constants() -> None:
    params = inspect.signature(chunk_document).parameters
    assert params["max_chars"].default == DEFAULT_CHUNK_CHARS == CONST_CHUNK == 480
    assert params["overlap_chars"].default == DEFAULT_OVERLAP_CHARS == CONST_OVERLAP == 80
    assert params["max_chars"].kind is inspect.Parameter.KEYWORD_ONLY


def test_default_budget_on_a_long_document() -> None:
    text = "\n".join(f"Paragraph {i} has a few words in it, nothing more." for i in range(60))
    chunks = chunk_document(text, META)
    assert len(chunks) > 1
    assert all(len(c.text) <= 480 for c in chunks)
    assert_chunks_honest(text, chunks, 480, 80)


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t \n", "\u3000\n"])
def test_empty_or_blank_text_gives_no_chunks(text: str) -> None:
    assert chunk_document(text, META) == []


def test_short_document_is_one_chunk_with_all_metadata() -> None:
    meta = DocumentMeta(
        doc_id="annual-2023",
        title="Annual report",
        topic="revenue",
        entity="ACME",
        geography="EU",
        period="2023",
        language="en",
        sensitivity="RESTRICTED",
        source_locator_prefix="reports/annual.pdf",
    )
    text = "  First paragraph.\n\nSecond paragraph.  \n"
    [chunk] = chunk_document(text, meta)
    assert chunk.text == "First paragraph.\n\nSecond paragraph."
    assert chunk.chunk_id == "annual-2023#c0"
    assert chunk.source_locator == "reports/annual.pdf#para1-2"
    assert (chunk.para_start, chunk.para_end) == (1, 2)
    assert (chunk.title, chunk.topic, chunk.entity) == ("Annual report", "revenue", "ACME")
    assert (chunk.geography, chunk.period, chunk.language) == ("EU", "2023", "en")
    assert chunk.sensitivity == "RESTRICTED"
    assert (chunk.parent_id, chunk.heading, chunk.window_text, chunk.parent_locator) == ("", "", "", "")


def test_locator_prefix_falls_back_to_doc_id() -> None:
    chunks = chunk_document("a\n\nb", DocumentMeta(doc_id="memo-7"), max_chars=2, overlap_chars=0)
    assert [c.source_locator for c in chunks] == ["memo-7#para1", "memo-7#para2"]
    assert [c.chunk_id for c in chunks] == ["memo-7#c0", "memo-7#c1"]


@pytest.mark.parametrize("sep", ["\n\n", "\n \t\n", "\r\n\r\n", "\n\n\n\n", "\n\u3000\n"])
def test_blank_line_variants_separate_paragraphs(sep: str) -> None:
    text = f"alpha{sep}beta"
    chunks = chunk_document(text, META, max_chars=5, overlap_chars=0)
    assert [(c.text, c.para_start) for c in chunks] == [("alpha", 1), ("beta", 2)]


def test_each_non_blank_line_is_a_paragraph() -> None:
    text = "line one\n  line two  \n\n\tline three"
    [chunk] = chunk_document(text, META)
    assert (chunk.para_start, chunk.para_end) == (1, 3)
    assert chunk.source_locator == "doc-1#para1-3"
    assert chunk.text == "line one\n  line two  \n\n\tline three"
    # Indentation and blank lines between paragraphs count against the budget: the text stays a slice.
    chunks = chunk_document(text, META, max_chars=20, overlap_chars=0)
    assert [c.text for c in chunks] == ["line one\n  line two", "line three"]
    assert [c.source_locator for c in chunks] == ["doc-1#para1-2", "doc-1#para3"]


def test_published_worked_example_four_paragraphs() -> None:
    paras = ["a" * 100, "b" * 100, "c" * 100, "d" * 100]
    text = "\n".join(paras)
    chunks = chunk_document(text, META, max_chars=250, overlap_chars=120)
    p1, p2, p3, p4 = paras
    assert [c.text for c in chunks] == [f"{p1}\n{p2}", f"{p2}\n{p3}", f"{p3}\n{p4}"]
    assert [c.source_locator for c in chunks] == ["doc-1#para1-2", "doc-1#para2-3", "doc-1#para3-4"]
    no_overlap = chunk_document(text, META, max_chars=250, overlap_chars=0)
    assert [c.text for c in no_overlap] == [f"{p1}\n{p2}", f"{p3}\n{p4}"]
    assert_chunks_honest(text, chunks, 250, 120)


def test_budget_never_cuts_into_the_next_paragraph() -> None:
    """A paragraph that does not fit starts the next chunk whole; the previous chunk is not topped up."""
    text = "\n".join(["a" * 100, "b" * 100, "c" * 100])
    chunks = chunk_document(text, META, max_chars=250, overlap_chars=0)
    assert [c.text for c in chunks] == ["a" * 100 + "\n" + "b" * 100, "c" * 100]


# ----------------------------------------------------------------------------- packing and overlap


def test_packing_and_carrying_a_trailing_paragraph() -> None:
    p1, p2, p3, p4 = "a" * 50, "b" * 20, "c" * 50, "d" * 10
    text = "\n\n".join([p1, p2, p3, p4])
    chunks = chunk_document(text, META, max_chars=80, overlap_chars=25)
    # p1+p2 = 72 chars fit; p2 (20 <= 25) is carried and p2+p3 = 72 fit; p3 (50) is too long to carry.
    assert [c.source_locator for c in chunks] == ["doc-1#para1-2", "doc-1#para2-3", "doc-1#para4"]
    assert [c.text for c in chunks] == [f"{p1}\n\n{p2}", f"{p2}\n\n{p3}", p4]
    assert_chunks_honest(text, chunks, 80, 25)


def test_overlap_carries_several_whole_paragraphs() -> None:
    paras = ["x" * 60, "y" * 5, "z" * 5, "w" * 60]
    text = "\n\n".join(paras)
    chunks = chunk_document(text, META, max_chars=80, overlap_chars=20)
    # "yyyyy\n\nzzzzz" is 12 chars, within the 20-char overlap, so both short paragraphs are carried.
    assert [(c.para_start, c.para_end) for c in chunks] == [(1, 3), (2, 4)]
    assert chunks[1].text == "yyyyy\n\nzzzzz\n\n" + "w" * 60


def test_paragraph_just_over_the_overlap_budget_is_not_carried() -> None:
    text = "\n\n".join(["a" * 40, "b" * 12, "c" * 20])
    chunks = chunk_document(text, META, max_chars=60, overlap_chars=10)
    assert [(c.para_start, c.para_end) for c in chunks] == [(1, 2), (3, 3)]
    assert chunks[1].text == "c" * 20


def test_carry_is_dropped_when_it_would_not_fit_with_the_next_paragraph() -> None:
    text = "\n\n".join(["a" * 50, "b" * 20, "c" * 60])
    chunks = chunk_document(text, META, max_chars=80, overlap_chars=25)
    assert [(c.para_start, c.para_end) for c in chunks] == [(1, 2), (3, 3)]


def test_zero_overlap_means_disjoint_paragraph_ranges() -> None:
    text = "\n\n".join(f"p{i}" * 5 for i in range(10))
    chunks = chunk_document(text, META, max_chars=40, overlap_chars=0)
    ranges = [(c.para_start, c.para_end) for c in chunks]
    assert len(ranges) > 1
    assert all(nxt[0] == prev[1] + 1 for prev, nxt in itertools.pairwise(ranges))


# ----------------------------------------------------------------------------- oversized paragraphs


def test_long_paragraph_splits_at_sentence_enders_without_overlap() -> None:
    sentences = ["第一句话很长。", "第二句也很长！", "Third one here?", "Fourth; ", "fifth."]
    para = "".join(sentences)
    text = f"intro\n\n{para}\n\noutro"
    chunks = chunk_document(text, META, max_chars=16, overlap_chars=5)
    long_chunks = [c for c in chunks if c.para_start == 2]
    assert all(c.para_end == 2 for c in long_chunks)
    expected = ["第一句话很长。第二句也很长！", "Third one here?", "Fourth; fifth."]
    assert [c.text for c in long_chunks] == expected
    assert [c.text for c in chunks if c.para_start != 2] == ["intro", "outro"]
    assert_chunks_honest(text, chunks, 16, 5)


def test_closing_quote_stays_with_its_sentence() -> None:
    text = "他说：“好。”然后离开了这里。"
    chunks = chunk_document(text, META, max_chars=8, overlap_chars=0)
    assert chunks[0].text == "他说：“好。”"


def test_sentence_longer_than_budget_is_hard_cut() -> None:
    text = "x" * 25
    chunks = chunk_document(text, META, max_chars=10, overlap_chars=3)
    assert [c.text for c in chunks] == ["x" * 10, "x" * 10, "x" * 5]
    assert {c.source_locator for c in chunks} == {"doc-1#para1"}


# ----------------------------------------------------------------------------- property test

_CHARS = "ab中文 \t。.!?；;”"
_SEPARATORS = ["\n\n", "\n \n", "\r\n\r\n", "\n\n\n", "\n", " "]


@st.composite
def mixed_documents(draw: st.DrawFn) -> str:
    """zh/en text built from pieces of random length joined by blank lines, single newlines or spaces."""
    pieces = draw(st.lists(st.text(alphabet=st.sampled_from(list(_CHARS)), max_size=50), max_size=12))
    out = ""
    for piece in pieces:
        out += piece + draw(st.sampled_from(_SEPARATORS))
    return out


@settings(max_examples=400, deadline=None)
@given(
    text=mixed_documents(),
    max_chars=st.integers(min_value=1, max_value=90),
    overlap_frac=st.floats(min_value=0.0, max_value=0.99),
)
def test_every_chunk_is_an_honest_substring(text: str, max_chars: int, overlap_frac: float) -> None:
    overlap = min(int(max_chars * overlap_frac), max_chars - 1)
    chunks = chunk_document(text, META, max_chars=max_chars, overlap_chars=overlap)
    assert_chunks_honest(text, chunks, max_chars, overlap)


def test_honesty_check_catches_a_chunker_that_rewrites_whitespace() -> None:
    """Reverse proof: a chunker that tidies paragraph joins must fail the same check."""

    def tidying_chunker(text: str, meta: DocumentMeta, **kw: int) -> list[Chunk]:
        return [replace(c, text=" ".join(c.text.split())) for c in chunk_document(text, meta, **kw)]

    text = "one two\n\nthree four"
    broken: Callable[..., list[Chunk]] = tidying_chunker
    with pytest.raises(AssertionError):
        assert_chunks_honest(text, broken(text, META, max_chars=40, overlap_chars=5), 40, 5)


def test_honesty_check_catches_a_chunker_that_cuts_into_the_next_paragraph() -> None:
    """Reverse proof: filling the budget with the head of the next paragraph breaks the paragraph rule."""

    def budget_filling_chunker(text: str, meta: DocumentMeta, **kw: int) -> list[Chunk]:
        chunks = chunk_document(text, meta, **kw)
        first = chunks[0]
        start = text.index(first.text)
        return [replace(first, text=text[start : start + kw["max_chars"]].strip()), *chunks[1:]]

    text = "\n".join(["a" * 100, "b" * 100, "c" * 100])
    with pytest.raises(AssertionError):
        assert_chunks_honest(text, budget_filling_chunker(text, META, max_chars=250, overlap_chars=0), 250, 0)


def test_para_locator_formats_and_validates() -> None:
    assert para_locator("f.txt", 1, 1) == "f.txt#para1"
    assert para_locator("f.txt", 1, 3) == "f.txt#para1-3"
    for bad in [(0, 1), (3, 2), (-1, -1)]:
        with pytest.raises(ValueError, match="1 <= start <= end"):
            para_locator("f.txt", *bad)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_chars": 0}, "max_chars"),
        ({"max_chars": -5, "overlap_chars": 0}, "max_chars"),
        ({"overlap_chars": -1}, "overlap_chars"),
        ({"max_chars": 50, "overlap_chars": 50}, "smaller than max_chars"),
        ({"max_chars": 50, "overlap_chars": 80}, "smaller than max_chars"),
        ({"max_chars": 10.5}, "max_chars"),
    ],
)
def test_bad_budgets_raise(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        chunk_document("text", META, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("doc_id", ["", "   ", "\n"])
def test_blank_doc_id_raises(doc_id: str) -> None:
    with pytest.raises(ValueError, match="doc_id"):
        chunk_document("some text", DocumentMeta(doc_id=doc_id))


@pytest.mark.parametrize("text", [b"bytes", None, 42])
def test_non_str_text_raises(text: object) -> None:
    with pytest.raises(ValueError, match="must be a str"):
        chunk_document(text, META)  # type: ignore[arg-type]


def test_lone_surrogates_raise() -> None:
    text = b"valid start \xff\xfe end".decode("utf-8", "surrogateescape")
    with pytest.raises(ValueError, match="surrogate"):
        chunk_document(text, META)


def test_large_document_is_not_quadratic() -> None:
    text = "\n".join(f"Paragraph {i}. 第{i}段。" for i in range(100_000))
    started = time.perf_counter()
    chunks = chunk_document(text, META)
    elapsed = time.perf_counter() - started
    assert chunks[-1].para_end == 100_000
    # Linear work is well under a second here; a quadratic pass would take minutes.
    assert elapsed < 20.0
