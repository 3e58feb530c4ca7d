"""The in-memory page index follows the store from the changed rows only: every row carries the stamp of
the write that last changed it, ``changes_since`` hands a reader what changed after the copy it holds, and
``LibraryPages.index`` applies it. After every kind of write, made through another connection, the
refreshed index holds exactly what a freshly built one holds and answers the same leads; with reverse
proofs (a refresh that keeps deleted pages, a store that reports no changed rows)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.visual.library_pages import LibraryPages
from ragspine.retrieval.visual.page_index import VisualPageIndex
from ragspine.retrieval.visual.page_store import PageChanges, VisualPageStore
from ragspine.retrieval.visual.pages import PageRecord
from tests.stores.conftest import backend, opened, page_stores, pg_server  # noqa: F401 - both engines
from tests.visual.visual_helpers import WordEncoder

LIB = "lib"


@pytest.fixture
def make_store(page_stores: Callable[..., Any]) -> Callable[..., Any]:  # noqa: F811
    """``make_store(name="pages")`` opens a page store, on SQLite and on PostgreSQL (each test that takes it
    runs on both); the same name opens the same store again (another connection, as another process or
    replica holds)."""
    return page_stores


QUERIES = ("harvest robot arm", "battery swap", "quarterly revenue table", "safety zone sensor")


def _records(doc: str, pages: list[str], **fields: Any) -> list[PageRecord]:
    return [
        PageRecord(doc, i, image=words, library=LIB, text=words, **fields) for i, words in enumerate(pages, 1)
    ]


def _write(store: VisualPageStore, doc: str, pages: list[str], *, reuse: bool = False, **fields: Any) -> None:
    """Make ``pages`` the stored pages of ``doc`` (``reuse``: keep the stored vectors, change the rest)."""
    records = _records(doc, pages, **fields)
    fresh = (
        {}
        if reuse
        else dict(
            zip((r.page for r in records), WordEncoder().embed_pages([r.image for r in records]), strict=True)
        )
    )
    store.replace_doc(doc, records, fresh, encoder=WordEncoder.name, library=LIB)


def _held(index: VisualPageIndex) -> list[tuple[Any, ...]]:
    return [
        (p.library, p.doc_id, p.page, p.sensitivity, dict(p.metadata), p.text, p.vectors.tobytes())
        for p in index._pages
    ]


def _same_as_a_fresh_index(pages: LibraryPages, make_store: Callable[..., Any]) -> None:
    refreshed = pages.index()
    fresh = VisualPageIndex(make_store(), WordEncoder(), device="cpu")
    assert _held(refreshed) == _held(fresh)
    on_topic: Callable[[Any], bool] = lambda p: p.metadata.get("topic") == "finance"  # noqa: E731
    for query in QUERIES:
        assert refreshed.search(query, k=5) == fresh.search(query, k=5), query
        assert refreshed.search(query, k=5, allowed=on_topic) == fresh.search(query, k=5, allowed=on_topic)


def _scenario(make_store: Callable[..., Any]) -> list[tuple[str, int]]:
    """Writes of every kind through another connection; after each, the refreshed index must equal a fresh
    one. Returns (step, pages whose vectors the refresh read)."""
    writer = make_store()
    _write(writer, "a", ["harvest robot arm", "arm battery swap", "arm safety zone"])
    _write(writer, "b", ["quarterly revenue table", "revenue by region"])
    _write(writer, "c", ["sensor calibration", "safety zone sensor"])
    pages = LibraryPages(LIB, make_store(), WordEncoder())
    pages.index().search("warm up", k=3)  # serving: the scoring matrix is built
    read_at = pages.store.version()
    steps: list[tuple[str, Callable[[], None]]] = [
        (
            "new vectors for a",
            lambda: _write(writer, "a", ["robot arm gripper", "battery swap station", "zone"]),
        ),
        (
            "metadata and label only for b",
            lambda: _write(
                writer, "b", ["", ""], reuse=True, metadata={"topic": "finance"}, sensitivity="CONFIDENTIAL"
            ),
        ),
        ("c deleted", lambda: writer.delete_doc("c", library=LIB)),
        ("d added", lambda: _write(writer, "d", ["harvest season plan", "robot fleet", "battery budget"])),
        ("a shrinks to one page", lambda: _write(writer, "a", ["harvest robot arm"])),
        ("nothing changed", lambda: None),
    ]
    read: list[tuple[str, int]] = []
    for step, write in steps:
        write()
        version = pages.store.version()
        _same_as_a_fresh_index(pages, make_store)
        moved = pages._index_version == version and version != read_at
        read.append((step, pages.last_refreshed if moved else 0))
        read_at = version
    return read


def test_the_index_follows_every_kind_of_write_from_the_changed_rows(make_store: Callable[..., Any]) -> None:
    assert _scenario(make_store) == [
        ("new vectors for a", 3),
        ("metadata and label only for b", 2),
        ("c deleted", 0),
        ("d added", 3),
        ("a shrinks to one page", 1),
        ("nothing changed", 0),
    ]


def test_reverse_proof_a_refresh_that_keeps_deleted_pages_is_caught(
    make_store: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    apply = VisualPageIndex.apply_changes

    def keeps_deleted(self: VisualPageIndex, changes: PageChanges) -> int:
        held = frozenset((p.library, p.doc_id, p.page) for p in self._pages)
        return apply(self, PageChanges(changes.version, changes.keys | held, changes.changed))

    monkeypatch.setattr(VisualPageIndex, "apply_changes", keeps_deleted)
    with pytest.raises(AssertionError):
        _scenario(make_store)


def test_reverse_proof_a_refresh_that_skips_changed_rows_is_caught(
    make_store: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    apply = VisualPageIndex.apply_changes

    def skips_changed(self: VisualPageIndex, changes: PageChanges) -> int:
        return apply(self, PageChanges(changes.version, changes.keys, ()))

    monkeypatch.setattr(VisualPageIndex, "apply_changes", skips_changed)
    with pytest.raises(AssertionError):
        _scenario(make_store)


def test_changes_since_hands_out_exactly_the_rows_changed_after_a_version(
    make_store: Callable[..., Any],
) -> None:
    store = make_store()
    _write(store, "a", ["one", "two"])
    first = store.version()
    _write(store, "b", ["three"])
    second = store.version()
    assert [(p.doc_id, p.page) for p in store.changes_since(0).changed] == [("a", 1), ("a", 2), ("b", 1)]
    assert [(p.doc_id, p.page) for p in store.changes_since(first).changed] == [("b", 1)]
    _write(make_store(), "a", ["", ""], reuse=True, metadata={"topic": "finance"})  # in place, elsewhere
    changes = store.changes_since(second)
    assert changes.version == store.version() == second + 1
    assert [(p.doc_id, p.page, dict(p.metadata)) for p in changes.changed] == [
        ("a", 1, {"topic": "finance"}),
        ("a", 2, {"topic": "finance"}),
    ]
    assert all(p.vectors.size for p in changes.changed)
    assert changes.keys == frozenset({(LIB, "a", 1), (LIB, "a", 2), (LIB, "b", 1)})
    store.delete_doc("b", library=LIB)
    gone = store.changes_since(second + 1)
    assert (gone.version, gone.changed, gone.keys) == (
        second + 2,
        (),
        frozenset({(LIB, "a", 1), (LIB, "a", 2)}),
    )
    assert store.changes_since(store.version()).changed == ()


def _stamps(path: Path) -> Mapping[tuple[str, int], int]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT doc_id, page, stamp FROM visual_pages").fetchall()
    return {(doc, page): stamp for doc, page, stamp in rows}


def test_a_store_from_before_row_stamps_gains_the_column_and_counts_every_row_changed(tmp_path: Path) -> None:
    path = tmp_path / "pages.sqlite"
    store = VisualPageStore(path)
    _write(store, "a", ["one", "two"])
    store.close()
    with sqlite3.connect(path) as conn:  # the file as an earlier release left it
        conn.execute("DROP TRIGGER visual_pages_unstamped")
        conn.execute("DROP INDEX visual_pages_stamp")
        conn.execute("ALTER TABLE visual_pages DROP COLUMN stamp")
    reopened = VisualPageStore(path)
    version = reopened.version()
    assert set(_stamps(path).values()) == {-1}
    assert [p.doc_id for p in reopened.changes_since(version).changed] == ["a", "a"]
    _write(reopened, "b", ["three"])
    assert set(_stamps(path).values()) == {version + 1}
    assert reopened.changes_since(version + 1).changed == ()


def test_a_document_relabelled_restricted_leaves_the_refreshed_index(make_store: Callable[..., Any]) -> None:
    pages = LibraryPages(LIB, make_store(), WordEncoder())
    pages.replace_doc(_records("memo", ["board restructuring plan", "layoff list"]), doc_id="memo")
    assert {lead.doc_id for lead in pages.index().search("board restructuring", k=5)} == {"memo"}
    pages.replace_doc(_records("memo", ["board restructuring plan"], sensitivity="RESTRICTED"), doc_id="memo")
    assert pages.index().search("board restructuring", k=5) == []
    assert pages.last_refreshed == 0
    _same_as_a_fresh_index(pages, make_store)


def _earlier_release_writes(store: Any, *statements: str) -> None:
    """Run ``statements`` and bump the version in one transaction on ``store``'s database, as a writer of
    an earlier release did: rows changed in place, no stamp touched."""
    bump = "UPDATE visual_pages_version SET version = version + 1 WHERE id = 1"
    if isinstance(store, VisualPageStore):
        with store._lock, store._conn:
            for statement in (*statements, bump):
                store._conn.execute(statement)
    else:  # PostgreSQL: the same SQL on the store's connection (search_path = its schema)
        with store._transaction() as conn:
            for statement in (*statements, bump):
                conn.execute(statement)


def _drop_unstamped_trigger(store: Any) -> None:
    if isinstance(store, VisualPageStore):
        with store._lock, store._conn:
            store._conn.execute("DROP TRIGGER visual_pages_unstamped")
    else:
        with store._transaction() as conn:
            conn.execute("DROP TRIGGER visual_pages_unstamped ON visual_pages")


def test_a_writer_that_does_not_stamp_rows_still_gets_seen(make_store: Callable[..., Any]) -> None:
    """A writer of an earlier release (during an upgrade) updates rows in place and bumps the version
    without stamping them: the store marks those rows changed, and the reader reads them."""
    writer = make_store()
    _write(writer, "a", ["harvest robot arm", "battery swap"])
    _write(writer, "b", ["quarterly revenue table"])
    pages = LibraryPages(LIB, make_store(), WordEncoder())
    assert all(not p.metadata for p in pages.index()._pages)
    _earlier_release_writes(
        writer, """UPDATE visual_pages SET metadata = '{"topic": "finance"}' WHERE doc_id = 'a'"""
    )
    assert [dict(p.metadata) for p in pages.index()._pages if p.doc_id == "a"] == [{"topic": "finance"}] * 2
    assert pages.last_refreshed == 2  # the two updated pages, not b's
    _same_as_a_fresh_index(pages, make_store)


def _mixed_window(make_store: Callable[..., Any], *, trigger: bool) -> LibraryPages:
    """Between two refreshes: an earlier release's in-place update of a, then a stamped write of b."""
    writer = make_store()
    _write(writer, "a", ["harvest robot arm", "battery swap"])
    _write(writer, "b", ["quarterly revenue table"])
    pages = LibraryPages(LIB, make_store(), WordEncoder())
    pages.index().search("warm up", k=3)
    if not trigger:
        _drop_unstamped_trigger(writer)
    _earlier_release_writes(
        writer, "UPDATE visual_pages SET sensitivity = 'CONFIDENTIAL', text = 'relabelled' WHERE doc_id = 'a'"
    )
    _write(writer, "b", ["revenue by region", "quarterly revenue table"])
    return pages


def test_an_unstamped_update_in_the_same_window_as_a_stamped_write_is_seen(
    make_store: Callable[..., Any],
) -> None:
    pages = _mixed_window(make_store, trigger=True)
    _same_as_a_fresh_index(pages, make_store)
    assert {p.doc_id: p.sensitivity for p in pages.index()._pages}["a"] == "CONFIDENTIAL"
    assert pages.last_refreshed == 4  # a's two updated pages and b's two new ones: nothing else read


def test_reverse_proof_without_the_trigger_the_mixed_window_is_missed(make_store: Callable[..., Any]) -> None:
    pages = _mixed_window(make_store, trigger=False)
    with pytest.raises(AssertionError):
        _same_as_a_fresh_index(pages, make_store)
