"""Structural chunkers (layout, parent_child, sentence_window, semantic, laws, qa, book) and make_chunker.

Each runs on Chinese and English samples: a law, an FAQ, a book chapter, and the sample corpus (its PDF
through the ingest parser). The provenance contract (tests/chunking/provenance.py) runs over every
registered chunker; reverse proofs show the checker catches a chunker that breaks it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ragspine.retrieval.chunking import chunker as chunker_mod
from ragspine.retrieval.chunking.chunker import (
    CHUNKER_ENTRY_POINT_GROUP,
    CHUNKER_ENV,
    Chunker,
    DefaultChunker,
    chunker_names,
    make_chunker,
)
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.domain_presets import BookChunker, LawsChunker, ParentChildChunker, QaChunker
from ragspine.retrieval.chunking.layout_chunker import (
    LayoutAwareChunker,
    group_children_by_parent,
    is_heading,
)
from ragspine.retrieval.chunking.semantic_chunker import SemanticChunker
from ragspine.retrieval.chunking.sentence_window_chunker import SentenceWindowChunker
from ragspine.retrieval.chunking.spans import line_spans
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta, para_locator
from ragspine.settings import Settings
from tests.chunking.provenance import assert_provenance
from tests.chunking.samples import (
    EN_BOOK,
    EN_FAQ,
    EN_LAW,
    FAMILY_SAMPLES,
    ZH_BOOK,
    ZH_FAQ,
    ZH_LAW,
    all_samples,
)

META = DocumentMeta(doc_id="d", title="T", language="zh", source_locator_prefix="d.txt")


class WordEmbedding:
    """Deterministic embedder: bag of a few topic words (no model)."""

    WORDS = ("battery", "tomato", "电池", "番茄", "article", "条")

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        return [[1.0 + t.lower().count(w) for w in self.WORDS] for t in texts]


def _build(name: str) -> Chunker:
    kwargs: dict[str, Any] = {"embedder": WordEmbedding()} if name == "semantic" else {}
    built = make_chunker(name, **kwargs)
    assert built is not None
    return built


SAMPLES = all_samples()


@pytest.mark.parametrize("sample", sorted(SAMPLES))
@pytest.mark.parametrize("name", chunker_names())
@pytest.mark.parametrize("budget", [(480, 80), (60, 10)], ids=["480", "60"])
def test_every_registered_chunker_keeps_provenance(name: str, sample: str, budget: tuple[int, int]) -> None:
    text, meta = SAMPLES[sample]
    chunks = _build(name).chunk(text, meta, max_chars=budget[0], overlap_chars=budget[1])
    assert chunks, f"{name} produced nothing for {sample}"
    assert all(len(c.text) <= budget[0] for c in chunks)
    assert_provenance(chunks, text, meta)


# ---------------------------------------------------------------- reverse proofs of the checker
def _tidy(chunks: list[Chunk]) -> list[Chunk]:
    return [replace(c, text=" ".join(c.text.split())) for c in chunks]


def _shift_locator(chunks: list[Chunk]) -> list[Chunk]:
    out = []
    for c in chunks:
        a, b = c.para_start + 1, c.para_end + 1
        prefix = c.source_locator.split("#")[0]
        out.append(replace(c, para_start=a, para_end=b, source_locator=f"{prefix}#para{a}-{b}"))
    return out


def _foreign_window(chunks: list[Chunk]) -> list[Chunk]:
    return [replace(c, window_text=chunks[-1].text) if c is chunks[0] else c for c in chunks]


@pytest.mark.parametrize(
    ("breaker", "message"),
    [(_tidy, "contiguous substring"), (_shift_locator, "locator"), (_foreign_window, "does not contain")],
    ids=["tidied-text", "shifted-locator", "foreign-window"],
)
def test_the_provenance_checker_catches_a_broken_chunker(breaker: Any, message: str) -> None:
    text, meta = FAMILY_SAMPLES["en_law"]
    good = LayoutAwareChunker().chunk(text, meta, max_chars=120, overlap_chars=20)
    assert_provenance(good, text, meta)
    with pytest.raises(AssertionError, match=message):
        assert_provenance(breaker(good), text, meta)


# ---------------------------------------------------------------- the families
def parent_text(kids: list[Chunk], text: str) -> str:
    """The source span of one parent, from its first child's first line to its last child's last line."""
    lines = line_spans(text)
    return text[lines[kids[0].para_start - 1][0] : lines[kids[-1].para_end - 1][1]]


def parent_texts(chunks: list[Chunk], text: str) -> list[str]:
    return [parent_text(kids, text) for kids in group_children_by_parent(chunks).values()]


def _clause_lines(text: str) -> list[str]:
    return [
        ln for ln in text.split("\n") if ln.startswith("Article") or (ln.startswith("第") and "条" in ln[:6])
    ]


@pytest.mark.parametrize("text", [ZH_LAW, EN_LAW], ids=["zh", "en"])
def test_laws_start_a_section_at_every_clause(text: str) -> None:
    chunks = LawsChunker().chunk(text, META)
    assert_provenance(chunks, text, META)
    clauses = _clause_lines(text)
    assert len(clauses) >= 5
    windows = parent_texts(chunks, text)
    # Every clause sits in exactly one parent, and no parent holds two clauses.
    for clause in clauses:
        assert sum(clause in w for w in windows) == 1, clause
    assert all(sum(c in w for c in clauses) <= 1 for w in windows)
    # Plain layout (short-line headings only) keeps several clauses in one section.
    layout_windows = parent_texts(LayoutAwareChunker().chunk(text, META), text)
    assert any(sum(c in w for c in clauses) >= 2 for w in layout_windows)


def test_laws_headings_are_clause_labels() -> None:
    zh = LawsChunker().chunk(ZH_LAW, META)
    assert [c.heading for c in zh if c.text.startswith("第四条")] == ["第四条"]
    # Every heading starts a section (ADR 0016 §3): the chapter line right before a clause is its own.
    assert [(c.heading, c.text) for c in zh if c.text.startswith("第一章")] == [
        ("第一章 总则", "第一章 总则")
    ]
    assert [c.heading for c in zh if c.text.startswith("第一条")] == ["第一条"]
    en = LawsChunker().chunk(EN_LAW, META)
    assert [c.heading for c in en if c.text.startswith("Article 4")] == ["Article 4"]


@pytest.mark.parametrize("text", [EN_FAQ, ZH_FAQ], ids=["en", "zh"])
def test_qa_pairs_each_question_with_its_answer(text: str) -> None:
    chunks = QaChunker().chunk(text, META)
    assert_provenance(chunks, text, META)
    parents = group_children_by_parent(chunks)
    questions = [
        line for line in text.split("\n") if line.startswith(("Q:", "问：")) or line.endswith(("?", "？"))
    ]
    assert len(questions) == 3
    for q in questions:
        owners = [pid for pid, kids in parents.items() if any(q in k.text for k in kids)]
        assert len(owners) == 1, q
        kids = parents[owners[0]]
        assert kids[0].heading.endswith(q)
        window = parent_text(kids, text)
        assert q in window and sum(other in window for other in questions) == 1
        # The answer lines after the question (up to the next question) sit under the same parent.
        lines = text.split("\n")
        i = lines.index(q)
        answer = []
        for line in lines[i + 1 :]:
            if line in questions or not line.strip():
                break
            answer.append(line)
        assert answer and all(a in window for a in answer)


@pytest.mark.parametrize("text", [EN_FAQ, ZH_FAQ], ids=["en", "zh"])
def test_qa_keeps_the_pair_together_when_it_must_split(text: str) -> None:
    chunks = QaChunker().chunk(text, META, max_chars=30, overlap_chars=0)
    assert_provenance(chunks, text, META)
    parents = group_children_by_parent(chunks)
    assert any(len(kids) > 1 for kids in parents.values())  # one pair, several children, one parent_id


@pytest.mark.parametrize(("text", "first"), [(ZH_BOOK, "第一章 种子"), (EN_BOOK, "Chapter 1: Seeds")])
def test_book_starts_a_section_at_every_chapter(text: str, first: str) -> None:
    chunks = BookChunker().chunk(text, META, max_chars=480, overlap_chars=80)
    assert_provenance(chunks, text, META)
    headings = list(dict.fromkeys(c.heading for c in chunks))
    assert headings[0] == first and len(headings) == 2
    parents = group_children_by_parent(chunks)
    assert len(parents) == 2
    for kids in parents.values():
        assert len({k.heading for k in kids}) == 1


def test_is_heading() -> None:
    for line in (
        "# Title",
        "## 2.1 Scope",
        "3.2 Results",
        "第三章 总则",
        "一、基本情况",
        "Chapter 4",
        "Article 7",
    ):
        assert is_heading(line), line
    for line in (
        "",
        "This is a sentence.",
        "2024 was a good year for the company, and it grew.",
        "第一条 " + "字" * 90,
    ):
        assert not is_heading(line), line


def test_layout_children_stay_inside_their_parent() -> None:
    text, meta = FAMILY_SAMPLES["en_book"]
    chunks = LayoutAwareChunker().chunk(text, meta, max_chars=120, overlap_chars=30)
    assert_provenance(chunks, text, meta)
    for pid, kids in group_children_by_parent(chunks).items():
        assert len({k.heading for k in kids}) == 1, pid
        assert all(k.text in parent_text(kids, text) for k in kids)
    # The window and its locator are the parent-child preset's (ADR 0016 §3), not the layout chunker's.
    assert all(c.window_text == "" and c.parent_locator == "" for c in chunks)
    ids = [c.parent_id for c in chunks]
    assert ids == sorted(ids, key=lambda p: int(p.split("#p")[1]))


def test_layout_caps_a_long_section_into_several_parents() -> None:
    text = "# One heading\n" + "\n".join(f"Line number {i} of a long section." for i in range(40))
    chunks = LayoutAwareChunker(parent_max_chars=300).chunk(text, META, max_chars=100, overlap_chars=0)
    assert_provenance(chunks, text, META)
    parents = group_children_by_parent(chunks)
    assert len(parents) > 3
    assert all(len(parent_text(kids, text)) <= 300 for kids in parents.values())
    assert {k.heading for k in chunks} == {"One heading"}


def _sections(text: str, chunker: LayoutAwareChunker) -> list[tuple[int, int]]:
    """(first, last) 1-based paragraph numbers of each heading section of ``text``, by the chunker's rule."""
    lines = line_spans(text)
    starts = [i for i, (a, b) in enumerate(lines) if chunker._is_heading(text[a:b])]
    if not starts or starts[0] != 0:
        starts = [0, *starts]
    ends = [*starts[1:], len(lines)]
    return [(a + 1, b) for a, b in zip(starts, ends, strict=True)]


@pytest.mark.parametrize(
    ("name", "text"),
    [("zh law", ZH_LAW), ("zh book", ZH_BOOK), ("en markdown", EN_BOOK), ("en law", EN_LAW)],
)
def test_parent_child_windows_are_whole_heading_sections(name: str, text: str) -> None:
    """ADR 0016 §3: each child's window is its whole heading section, ``parent_locator`` that section's
    real paragraph span, whatever its length; the children are the layout chunker's."""
    meta = META
    chunks = ParentChildChunker().chunk(text, meta, max_chars=120, overlap_chars=20)
    assert_provenance(chunks, text, meta)
    layout = LayoutAwareChunker().chunk(text, meta, max_chars=120, overlap_chars=20)
    assert [c.text for c in chunks] == [c.text for c in layout]  # the same children
    lines = line_spans(text)
    spans = _sections(text, LayoutAwareChunker())
    sections = {para_locator("d.txt", a, b): text[lines[a - 1][0] : lines[b - 1][1]] for a, b in spans}
    for chunk in chunks:
        assert chunk.parent_locator in sections, (name, chunk.parent_locator)
        assert chunk.window_text == sections[chunk.parent_locator]
        assert chunk.text in chunk.window_text
    assert {c.parent_locator for c in chunks} == set(sections)  # every section is some child's window


def test_a_long_section_is_one_window() -> None:
    """The measured bug: a 796-character section gave two windows (para1-4, para5-7); it is one."""
    body = "\n".join(
        f"Paragraph {i} " + "of the long section, with enough words to fill it. " * 2 for i in range(6)
    )
    text = "## One section\n" + body
    assert 700 < len(text) < 900
    chunks = ParentChildChunker().chunk(text, META, max_chars=240, overlap_chars=0)
    assert {c.parent_locator for c in chunks} == {"d.txt#para1-7"}
    assert {c.window_text for c in chunks} == {text.rstrip()}  # the section's stripped span


def test_parent_child_small_children_option() -> None:
    text, meta = FAMILY_SAMPLES["en_book"]
    chunks = ParentChildChunker(child_chars=50).chunk(text, meta)
    assert_provenance(chunks, text, meta)
    assert all(len(c.text) <= 50 and c.text in c.window_text for c in chunks)
    with pytest.raises(ValueError, match="child_chars"):
        ParentChildChunker(child_chars=0)


def test_only_the_parent_child_preset_adds_parent_keys() -> None:
    for text in (ZH_LAW, EN_BOOK, ZH_FAQ):
        for chunker in (LayoutAwareChunker(), LawsChunker(), BookChunker(), QaChunker()):
            assert all(c.window_text == "" and c.parent_locator == "" for c in chunker.chunk(text, META))
        assert all(c.window_text == "" and c.parent_locator == "" for c in chunk_document(text, META))


def test_sentence_window_is_one_chunk_per_sentence_with_neighbours() -> None:
    text = "A one. B two. C three.\nD four! E five? F six.\n\nG seven."
    chunks = SentenceWindowChunker(window_size=1).chunk(text, META)
    assert_provenance(chunks, text, META)
    assert [c.text for c in chunks] == [
        "A one.",
        "B two.",
        "C three.",
        "D four!",
        "E five?",
        "F six.",
        "G seven.",
    ]
    assert chunks[0].window_text == "A one. B two."
    assert chunks[3].window_text == "C three.\nD four! E five?"
    assert chunks[-1].window_text == "F six.\n\nG seven."
    assert chunks[3].parent_locator == chunks[3].source_locator.split("#")[0] + "#para1-2"
    assert all(c.parent_id == "" for c in chunks)
    wide = SentenceWindowChunker().chunk(text, META)
    assert wide[3].window_text == text.strip()


def test_semantic_chunker_under_its_published_path() -> None:
    chunks = SemanticChunker(WordEmbedding(), breakpoint_percentile=50).chunk(EN_FAQ, META)
    assert chunks and all(c.text in EN_FAQ for c in chunks)


def test_semantic_chunker_without_a_model_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragspine.retrieval.vector import embedding_backends

    monkeypatch.setattr(embedding_backends, "make_embedding_backend", lambda spec=None, **kw: None)
    with pytest.raises(ImportError, match=r"ragspine\[models\]"):
        SemanticChunker().chunk(EN_FAQ, META)
    with pytest.raises(ValueError, match="max_chars"):
        SemanticChunker().chunk(EN_FAQ, META, max_chars=0)  # validated before any model is needed


# ---------------------------------------------------------------- make_chunker and bad input
def test_make_chunker_names_aliases_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CHUNKER_ENV == "RAGSPINE_CHUNKER"
    assert isinstance(make_chunker("default"), DefaultChunker)
    assert make_chunker("") is None and make_chunker("none") is None
    assert isinstance(make_chunker("Parent-Child"), ParentChildChunker)
    assert isinstance(make_chunker("small_to_big"), ParentChildChunker)
    assert isinstance(make_chunker("laws"), LawsChunker)
    assert isinstance(make_chunker("qa"), QaChunker)
    assert isinstance(make_chunker("book"), BookChunker)
    assert isinstance(make_chunker("layout"), LayoutAwareChunker)
    window = make_chunker("sentence_window", window_size=1)
    assert isinstance(window, SentenceWindowChunker) and window.window_size == 1
    # The service passes its embedding backend to whichever chunker it builds; only semantic uses it.
    assert isinstance(make_chunker("layout", embedding_backend=WordEmbedding()), LayoutAwareChunker)
    semantic = make_chunker("semantic", embedding_backend=WordEmbedding())
    assert isinstance(semantic, SemanticChunker) and isinstance(semantic.embedder, WordEmbedding)
    # spec=None reads the settings given (RAGSPINE_CHUNKER through Settings.from_env), never the
    # environment behind them.
    assert isinstance(make_chunker(settings=Settings.from_env({CHUNKER_ENV: "qa"})), QaChunker)
    monkeypatch.setenv(CHUNKER_ENV, "qa")
    assert isinstance(make_chunker(), DefaultChunker)
    d = DefaultChunker()
    assert d.chunk(ZH_LAW, META) == chunk_document(ZH_LAW, META) == d(ZH_LAW, META)


def test_make_chunker_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="choose one of: default, semantic, layout, parent_child"):
        make_chunker("paragraphs")
    with pytest.raises(ValueError, match="window_size"):
        make_chunker("sentence_window", window_size=-1)
    with pytest.raises(ValueError, match="does not take"):
        make_chunker("laws", window_size=2)
    with pytest.raises(ValueError, match="child_chars"):
        ParentChildChunker(child_chars=0)
    with pytest.raises(ValueError, match="parent_max_chars"):
        LayoutAwareChunker(parent_max_chars=0)
    with pytest.raises(ValueError, match="string"):
        make_chunker(3)  # type: ignore[arg-type]
    for name in ("layout", "sentence_window", "qa"):
        built = make_chunker(name)
        assert built is not None
        with pytest.raises(ValueError, match="overlap_chars"):
            built.chunk("text", META, max_chars=10, overlap_chars=10)
        with pytest.raises(ValueError, match="doc_id"):
            built.chunk("text", DocumentMeta(doc_id=""))
        assert built.chunk(" \n\n ", META) == []


class _Upper:
    """A third-party chunker: one chunk per document (the whole trimmed text)."""

    def __init__(self, tag: str = "") -> None:
        self.tag = tag

    def chunk(
        self, text: str, meta: DocumentMeta, *, max_chars: int = 480, overlap_chars: int = 80
    ) -> list[Chunk]:
        return chunk_document(text, meta, max_chars=max_chars, overlap_chars=overlap_chars)[:1]


class _EntryPoint:
    def __init__(self, name: str, target: Any) -> None:
        self.name = name
        self._target = target

    def load(self) -> Any:
        return self._target


def test_third_party_chunkers_register_by_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def fake_entry_points(*, group: str) -> list[_EntryPoint]:
        seen.append(group)
        return [_EntryPoint("upper", _Upper), _EntryPoint("broken", object)]

    monkeypatch.setattr(chunker_mod, "entry_points", fake_entry_points)
    built = make_chunker("upper", tag="x")
    assert isinstance(built, _Upper) and built.tag == "x"
    assert seen[0] == CHUNKER_ENTRY_POINT_GROUP
    assert "upper" in chunker_names()
    with pytest.raises(ValueError, match="no chunk"):
        make_chunker("broken")
    # A chunker with only chunk() becomes the callable an index calls.
    from ragspine.retrieval.chunking.chunker import as_chunk_fn

    fn = as_chunk_fn(make_chunker("upper"))
    assert len(fn("A.\n\nB.", META)) == 1


def test_helm_example_parent_child_assembles_and_ingests(tmp_path: Any) -> None:
    from ragspine.retrieval.assembly import assemble_index
    from ragspine.retrieval.chunking.chunk_store import ChunkStore
    from ragspine.settings import Settings

    with ChunkStore(tmp_path / "c.db") as store:
        index = assemble_index(store, Settings(retrieval_mode="economy", chunker="parent_child"))
        text, meta = FAMILY_SAMPLES["en_law"]
        assert index.ingest(text, meta) > 0
        stored = store.iter_chunks(doc_id=meta.doc_id)
        assert stored and all(c.parent_id and c.window_text and c.parent_locator for c in stored)


def test_index_ingest_takes_a_per_document_chunker(tmp_path: Any) -> None:
    from ragspine.retrieval.chunking.chunk_store import ChunkStore
    from ragspine.retrieval.lexical.narrative_index import NarrativeIndex

    text, meta = FAMILY_SAMPLES["zh_law"]
    with ChunkStore(tmp_path / "c.db") as store:
        index = NarrativeIndex(store)
        assert index.ingest(text, meta, chunker="laws") > 0
        laws = store.iter_chunks(doc_id=meta.doc_id)
        assert [c.text for c in laws] == [c.text for c in LawsChunker().chunk(text, meta)]
        assert index._named_chunker("LAWS") is index._named_chunker("laws")  # built once
        with pytest.raises(ValueError, match="choose one of"):
            index.ingest(text, meta, chunker="statutes")
        assert store.iter_chunks(doc_id=meta.doc_id) == laws  # the stored version is untouched
        assert index.ingest(text, meta, chunker=chunk_document) > 0
        assert all(c.parent_id == "" for c in store.iter_chunks(doc_id=meta.doc_id))
