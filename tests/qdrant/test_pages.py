"""Visual pages on Qdrant (``QdrantPageIndex`` behind ``LibraryPages``): one conformance pack run against the
in-process page index and the Qdrant pages collection (local mode), MaxSim agreement with the in-process
scorer, RESTRICTED pages never upserted, library isolation, no mix of versions under concurrent
replacement, outages flagged. Each invariant comes with a deliberately broken index its check catches."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from qdrant_client import QdrantClient, models

from ragspine.retrieval.filtering.metadata_filter import make_filter
from ragspine.retrieval.index_backend import page_index_factory
from ragspine.retrieval.qdrant.connection import IndexUnavailableError, QdrantConfig
from ragspine.retrieval.qdrant.pages import LIVE, VERSION, QdrantPageIndex, doc_version
from ragspine.retrieval.visual.library_pages import LibraryPages
from ragspine.retrieval.visual.page_index import VisualPageIndex
from ragspine.retrieval.visual.page_store import VisualPageStore
from ragspine.retrieval.visual.pages import PageRecord
from ragspine.settings import Settings

BACKENDS = ("memory", "qdrant")
DIM = 32


def _unit(seed_text: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(seed_text.lower().encode()).digest()[:4], "little")
    vec = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return vec / np.linalg.norm(vec)


class Words:
    """Encoder over string "images": one unit vector per word, so MaxSim counts shared words."""

    name = "words:test"
    dim = DIM

    def __init__(self) -> None:
        self.page_inputs: list[object] = []

    def embed_pages(self, images: Sequence[object]) -> list[np.ndarray]:
        self.page_inputs.extend(images)
        return [np.stack([_unit(w) for w in str(image).split()]) for image in images]

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [np.stack([_unit(w) for w in text.split()]) for text in texts]


@pytest.fixture
def client() -> Iterator[Any]:
    c = QdrantClient(location=":memory:")
    yield c
    c.close()


def qdrant_factory(client: Any, library: str, cls: type[QdrantPageIndex] = QdrantPageIndex) -> Any:
    def build(store: Any, encoder: Any) -> QdrantPageIndex:
        return cls(client=client, config=QdrantConfig(), library=library, store=store, encoder=encoder)

    return build


def shelf(backend: str, client: Any, *, library: str = "lib", encoder: Any = None, **kw: Any) -> LibraryPages:
    external = qdrant_factory(client, library, **kw) if backend == "qdrant" else None
    return LibraryPages(library, VisualPageStore(":memory:"), encoder or Words(), external=external)


def records(doc_id: str, pages: Sequence[str], *, library: str = "lib", **fields: Any) -> list[PageRecord]:
    sensitivity = fields.pop("sensitivity", "INTERNAL")
    return [
        PageRecord(
            doc_id, i + 1, image=words, library=library, sensitivity=sensitivity, metadata=dict(fields)
        )
        for i, words in enumerate(pages)
    ]


PUBLIC = ["revenue growth table", "cash flow statement", "balance sheet total assets", "revenue by segment"]
SECRET = ["revenue merger secret plan", "nightjar acquisition revenue"]


# --- conformance pack: both backends --------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_best_page_first_and_the_same_leads_on_both_backends(backend: str, client: Any) -> None:
    pages = shelf(backend, client)
    reference = shelf("memory", client)
    for target in (pages, reference):
        target.replace_doc(records("pub", PUBLIC, topic="finance"), doc_id="pub")
        target.replace_doc(records("ops", ["plant safety audit", "revenue audit"], topic="ops"), doc_id="ops")
    leads = pages.search("revenue growth", k=4)
    assert leads[0].locator == "pub#page=1" and leads[0].library == "lib"
    expected = reference.search("revenue growth", k=4)
    assert [lead.locator for lead in leads] == [lead.locator for lead in expected]
    assert [lead.score for lead in leads] == pytest.approx([lead.score for lead in expected], rel=1e-5)


def check_restricted_isolation(pages: LibraryPages) -> list[str]:
    """What of a RESTRICTED document leaked: into the encoder, the store, the collection or an answer."""
    encoder = pages.encoder
    pages.replace_doc(records("pub", PUBLIC), doc_id="pub")
    pages.replace_doc(records("sec", SECRET, sensitivity="RESTRICTED"), doc_id="sec")
    leaks = [f"encoder saw {x!r}" for x in encoder.page_inputs if x in SECRET]
    leaks += [f"stored {p.locator}" for p in pages.store.load() if p.doc_id == "sec"]
    if isinstance(pages.external, QdrantPageIndex):
        index = pages.external
        every = index._scroll(None, True)  # hidden points included
        leaks += [f"collection holds {p['doc_id']}" for p in every if p.get("sensitivity") == "RESTRICTED"]
    for query in ("secret merger revenue", "nightjar acquisition"):
        leaks += [f"answer has {lead.locator}" for lead in pages.search(query, k=20) if lead.doc_id == "sec"]
    return leaks


@pytest.mark.parametrize("backend", BACKENDS)
def test_restricted_pages_never_reach_the_encoder_store_collection_or_answers(
    backend: str, client: Any
) -> None:
    assert check_restricted_isolation(shelf(backend, client)) == []


class _UpsertsRestricted(QdrantPageIndex):
    """Broken: also publishes pages the caller hands it straight from the encoder, RESTRICTED included."""

    def publish(self, doc_ids: Any) -> int:
        changed = super().publish(doc_ids)
        if self._exists():
            vectors = Words().embed_pages(SECRET)
            points = [
                models.PointStruct(
                    id=900 + i,
                    vector={"colpali": v.tolist()},
                    payload={"doc_id": "sec", "sensitivity": "RESTRICTED", LIVE: True, VERSION: "x"}
                    | {"rs_page": i + 1, "rs_locator": f"sec#page={i + 1}", "rs_encoder": self.encoder.name},
                )
                for i, v in enumerate(vectors)
            ]
            self.client.upsert(self.collection, points, wait=True)
        return changed


def test_reverse_proof_the_restricted_check_catches_an_index_that_upserts_them(client: Any) -> None:
    leaks = check_restricted_isolation(shelf("qdrant", client, cls=_UpsertsRestricted))
    assert any("collection holds sec" in leak for leak in leaks)
    assert any("answer has sec" in leak for leak in leaks)


def narrowing_violations(pages: LibraryPages) -> list[str]:
    pages.replace_doc(records("fin", PUBLIC, topic="finance"), doc_id="fin")
    pages.replace_doc(
        records("ops", ["plant safety audit", "revenue audit table"], topic="ops"), doc_id="ops"
    )
    everything = [lead.locator for lead in pages.search("revenue audit table", k=20)]
    only_ops = make_filter([("topic", "eq", "ops")])
    narrowed = pages.search("revenue audit table", k=20, mfilter=only_ops)
    kept = [lead.locator for lead in narrowed]
    problems = [f"{loc} is not topic ops" for loc in kept if not loc.startswith("ops#")]
    if kept != [loc for loc in everything if loc in kept]:
        problems.append(f"filtered order {kept} is not a subsequence of {everything}")
    if set(kept) != {"ops#page=1", "ops#page=2"}:
        problems.append(f"filtered answer {kept} misses ops pages")
    top1 = pages.search("revenue growth table", k=1, mfilter=only_ops)
    if [lead.locator for lead in top1] != ["ops#page=2"]:
        problems.append(f"k=1 within the filter gave {top1}")
    return problems


@pytest.mark.parametrize("backend", BACKENDS)
def test_filters_only_narrow(backend: str, client: Any) -> None:
    assert narrowing_violations(shelf(backend, client)) == []


class _IgnoresFilter(QdrantPageIndex):
    """Broken: scores every page, whatever the filter says."""

    def search(self, query: str, *, k: int = 10, mfilter: Any = None) -> Any:
        return super().search(query, k=k)


class _FiltersAfterTopK(QdrantPageIndex):
    """Broken: takes the top k of everything, then drops what the filter refuses."""

    def search(self, query: str, *, k: int = 10, mfilter: Any = None) -> Any:
        leads = super().search(query, k=k)
        return [lead for lead in leads if mfilter is None or lead.doc_id == "ops"]


@pytest.mark.parametrize("broken", [_IgnoresFilter, _FiltersAfterTopK])
def test_reverse_proof_the_narrowing_check_catches_broken_filters(client: Any, broken: Any) -> None:
    assert narrowing_violations(shelf("qdrant", client, cls=broken)) != []


@pytest.mark.parametrize("backend", BACKENDS)
def test_withdrawn_and_replaced_pages_are_never_served(backend: str, client: Any) -> None:
    pages = shelf(backend, client)
    pages.replace_doc(records("pub", PUBLIC), doc_id="pub")
    pages.replace_doc(records("other", ["revenue growth table"]), doc_id="other")
    assert pages.remove_doc("pub") == 4
    assert {lead.doc_id for lead in pages.search("revenue growth", k=10)} == {"other"}
    pages.replace_doc(records("other", ["goodwill impairment"]), doc_id="other")
    (lead,) = pages.search("revenue growth", k=10)
    assert lead.score < 1.5  # the old page's vectors no longer answer
    assert pages.search("goodwill impairment", k=1)[0].score == pytest.approx(2.0, abs=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_search_arguments_are_value_errors(backend: str, client: Any) -> None:
    pages = shelf(backend, client)
    pages.replace_doc(records("pub", PUBLIC), doc_id="pub")
    for query, k in (("  ", 3), ("revenue", 0)):
        with pytest.raises(ValueError):
            pages.search(query, k=k)


# --- library isolation ----------------------------------------------------------------------------------


def isolation_leaks(make: Callable[[str], LibraryPages]) -> list[str]:
    a, b = make("alpha"), make("beta")
    a.replace_doc(records("a-doc", PUBLIC, library="alpha"), doc_id="a-doc")
    b.replace_doc(records("b-doc", PUBLIC, library="beta"), doc_id="b-doc")
    leaks = [f"alpha served {x.locator}" for x in a.search("revenue", k=20) if x.doc_id != "a-doc"]
    leaks += [f"beta served {x.locator}" for x in b.search("revenue", k=20) if x.doc_id != "b-doc"]
    b.remove_doc("b-doc")
    leaks += ["alpha lost pages when beta withdrew"] if not a.search("revenue", k=1) else []
    return leaks


def test_libraries_are_isolated(client: Any) -> None:
    assert isolation_leaks(lambda name: shelf("qdrant", client, library=name)) == []


class _OneCollection(QdrantPageIndex):
    """Broken: every library writes to one shared collection."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.collection = "shared__pages"
        self.meta_collection = "shared__pages__meta"


def test_reverse_proof_a_shared_collection_is_caught(client: Any) -> None:
    assert isolation_leaks(lambda name: shelf("qdrant", client, library=name, cls=_OneCollection)) != []


# --- MaxSim agreement -----------------------------------------------------------------------------------


class RandomVectors:
    """Encoder stand-in whose query vectors are seeded random unit rows (pages are written directly)."""

    name = "random:test"
    dim = 16

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        out = []
        for _ in texts:
            q = self.rng.standard_normal((int(self.rng.integers(3, 12)), self.dim)).astype(np.float32)
            out.append(q / np.linalg.norm(q, axis=1, keepdims=True))
        return out

    def embed_pages(self, images: Sequence[object]) -> list[np.ndarray]:
        raise AssertionError("pages are written to the store directly in this test")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_maxsim_top_k_agrees_with_the_in_process_scorer(client: Any, seed: int) -> None:
    rng = np.random.default_rng(seed)
    store = VisualPageStore(":memory:", dtype="float32")
    recs, blocks = [], []
    for d in range(12):
        for p in range(1, int(rng.integers(1, 6)) + 1):
            block = rng.standard_normal((int(rng.integers(4, 40)), 16)).astype(np.float32)
            blocks.append(block / np.linalg.norm(block, axis=1, keepdims=True))
            recs.append(PageRecord(f"d{d}", p, image=None, library="lib", metadata={"topic": f"t{d % 3}"}))
    store.put_pages(recs, blocks, encoder="random:test")
    in_process = VisualPageIndex(store, RandomVectors(seed + 100), cache_dtype="float32")
    pages = LibraryPages("lib", store, RandomVectors(seed + 100), external=qdrant_factory(client, "lib"))
    assert isinstance(pages.external, QdrantPageIndex) and len(pages.external) == len(recs)
    topic = make_filter([("topic", "in", ["t0", "t2"])])
    for i in range(10):
        want = in_process.search(f"q{i}", k=7)
        got = pages.search(f"q{i}", k=7)
        assert [x.locator for x in got] == [x.locator for x in want]
        assert [x.score for x in got] == pytest.approx([x.score for x in want], rel=1e-5, abs=1e-5)
        want = in_process.search(f"f{i}", k=5, allowed=lambda p: p.metadata["topic"] in ("t0", "t2"))
        got = pages.search(f"f{i}", k=5, mfilter=topic)
        assert [x.locator for x in got] == [x.locator for x in want]


# --- versions under concurrent replacement --------------------------------------------------------------

V1 = ["zebra alpha"] * 3  # the pages of one version score alike, those of two versions differ
V2 = ["zebra beta"] * 2


def mixes(pages: LibraryPages) -> list[str]:
    """A document answering with pages of two versions (read from the leads' scores: all pages of a version
    score alike), or the live points of a document carrying two versions."""
    assert isinstance(pages.external, QdrantPageIndex)
    bad = [f"{d} live at {sorted(v)}" for d, v in pages.external.live_versions().items() if len(v) > 1]
    leads = pages.search("zebra alpha beta", k=20)
    kinds = {round(lead.score, 3) for lead in leads if lead.doc_id == "doc"}
    if len(leads) > 3 or len(kinds) > 1:
        bad.append(f"answer mixes versions: {[(x.locator, round(x.score, 3)) for x in leads]}")
    return bad


def replace_back_and_forth(pages: LibraryPages, rounds: int) -> None:
    for i in range(rounds):
        pages.replace_doc(records("doc", V2 if i % 2 == 0 else V1), doc_id="doc")


def probe_every_step(pages: LibraryPages) -> list[str]:
    assert isinstance(pages.external, QdrantPageIndex)
    seen: list[str] = []
    pages.replace_doc(records("doc", V1), doc_id="doc")
    pages.external.after_step = lambda step: seen.extend(f"after {step}: {m}" for m in mixes(pages))
    replace_back_and_forth(pages, 4)
    pages.remove_doc("doc")
    pages.external.after_step = None
    seen += [f"withdrawn doc served: {x.locator}" for x in pages.search("zebra", k=20)]
    return seen


def test_no_mix_of_versions_at_any_step_of_a_replacement(client: Any) -> None:
    assert probe_every_step(shelf("qdrant", client)) == []


class _ShowsBeforeHiding(QdrantPageIndex):
    """Broken: publishes the new version live first, then hides and deletes the old one."""

    def _publish(self, doc_ids: list[str]) -> int:
        stored = self._stored(doc_ids)
        target = {d: doc_version(p) for d, p in stored.items()}
        if target:
            self._upsert_hidden(list(target), stored, target)
        for doc_id in doc_ids:
            doc = models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id))
            this = models.FieldCondition(key=VERSION, match=models.MatchValue(value=target.get(doc_id, "")))
            self.client.set_payload(self.collection, {LIVE: True}, points=models.Filter(must=[doc, this]))
            self._step("showed new")
            other = models.Filter(must=[doc], must_not=[this])
            self.client.delete(self.collection, points_selector=other, wait=True)
            self._step("deleted old")
        return len(doc_ids)


def test_reverse_proof_showing_before_hiding_is_caught(client: Any) -> None:
    assert probe_every_step(shelf("qdrant", client, cls=_ShowsBeforeHiding)) != []


def concurrent_mixes(pages: LibraryPages, rounds: int = 16) -> list[str]:
    """Mixes two reader threads see while a writer replaces the document ``rounds`` times (each protocol
    step is followed by a 2 ms pause, so readers run between steps)."""
    assert isinstance(pages.external, QdrantPageIndex)
    pages.replace_doc(records("doc", V1), doc_id="doc")
    pages.external.after_step = lambda step: time.sleep(0.002)
    found: list[str] = []
    reads = [0]
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            found.extend(mixes(pages))
            reads[0] += 1

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        replace_back_and_forth(pages, rounds)
    finally:
        done.set()
        for t in readers:
            t.join()
    assert reads[0] > rounds, f"only {reads[0]} reads raced {rounds} replacements"
    return found


def test_no_mix_of_versions_under_concurrent_replacement(client: Any) -> None:
    assert concurrent_mixes(shelf("qdrant", client)) == []


def test_reverse_proof_the_concurrent_check_catches_the_naive_order(client: Any) -> None:
    assert concurrent_mixes(shelf("qdrant", client, cls=_ShowsBeforeHiding)) != []


# --- wiring, outages, migrations ------------------------------------------------------------------------


def test_memory_backend_keeps_the_in_process_page_index() -> None:
    assert page_index_factory(Settings(), library="lib") is None


def test_unreachable_qdrant_fails_at_start_never_falls_back() -> None:
    settings = Settings(index_backend="qdrant", qdrant_url="http://127.0.0.1:9", qdrant_timeout_s=1.0)
    with pytest.raises(IndexUnavailableError, match=r"127\.0\.0\.1:9"):
        page_index_factory(settings, library="lib")


class _Down:
    """A client whose every call fails the way a lost connection does."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("connection refused")

        return fail


def test_an_outage_while_serving_raises_index_unavailable_and_the_pipeline_flags_it(client: Any) -> None:
    from ragspine.retrieval.pipeline.stages import VisualChannelStage

    pages = shelf("qdrant", client)
    pages.replace_doc(records("pub", PUBLIC), doc_id="pub")
    assert isinstance(pages.external, QdrantPageIndex)
    pages.external.client = _Down()
    with pytest.raises(IndexUnavailableError, match=r"during (pages search|open)"):
        pages.search("revenue", k=3)

    class Source:
        def pages(self) -> LibraryPages:
            return pages

    class Request:
        visual, top_k = True, 3

    class State:
        request, sources, query, keyword, mfilter = Request(), [Source()], "revenue", {}, None

        def __init__(self) -> None:
            self.visual: list[Any] = []
            self.flags: list[str] = []

        def degrade(self, what: str, why: str) -> None:
            self.flags.append(what)

    state = State()
    VisualChannelStage().run(state)  # type: ignore[arg-type]
    assert state.flags == ["visual"] and state.visual == []


def test_a_write_during_an_outage_is_published_by_the_next_write(client: Any) -> None:
    pages = shelf("qdrant", client)
    assert isinstance(pages.external, QdrantPageIndex)
    pages.external.client = _Down()
    with pytest.raises(IndexUnavailableError):
        pages.replace_doc(records("pub", PUBLIC), doc_id="pub")
    pages.external.client = client
    pages.replace_doc(records("other", ["cash flow"]), doc_id="other")
    assert {lead.doc_id for lead in pages.search("revenue growth", k=10)} == {"pub", "other"}


def test_a_front_opening_the_library_catches_up_with_the_store(client: Any) -> None:
    store = VisualPageStore(":memory:")
    LibraryPages("lib", store, Words()).replace_doc(records("pub", PUBLIC), doc_id="pub")  # no Qdrant yet
    pages = LibraryPages("lib", store, Words(), external=qdrant_factory(client, "lib"))
    assert pages.search("revenue growth", k=1)[0].locator == "pub#page=1"


def test_pages_of_another_encoder_ask_for_a_reindex(client: Any) -> None:
    first = shelf("qdrant", client)
    first.replace_doc(records("pub", PUBLIC), doc_id="pub")
    other = Words()
    other.name = "another:model"
    later = LibraryPages("lib", VisualPageStore(":memory:"), other, external=qdrant_factory(client, "lib"))
    with pytest.raises(ValueError, match="ragspine reindex"):
        later.search("revenue", k=3)


def test_reindex_publishes_the_store_and_withdraws_what_it_no_longer_has(tmp_path: Any) -> None:
    from ragspine.retrieval.index_backend import qdrant_config, shared_client
    from ragspine.retrieval.reindex import reindex_pages

    settings = Settings(
        index_backend="qdrant", qdrant_url=str(tmp_path / "q"), qdrant_collection_prefix="rp_"
    )
    store = VisualPageStore(tmp_path / "pages.db")
    writer = LibraryPages("lib", store, Words())  # pages written while no Qdrant index was configured
    writer.replace_doc(records("pub", PUBLIC), doc_id="pub")
    writer.replace_doc(records("gone", ["cash flow"]), doc_id="gone")
    index, changed = reindex_pages(store, settings, library="lib")
    assert changed == 2 and set(index.live_versions()) == {"pub", "gone"} and len(index) == 5
    store.delete_doc("gone", library="lib")  # behind the index's back
    assert reindex_pages(store, settings, library="lib")[1] == 1
    assert reindex_pages(store, settings, library="lib")[1] == 0  # nothing left to change
    index, changed = reindex_pages(store, settings, library="lib", recreate=True)
    assert changed == 1 and set(index.live_versions()) == {"pub"}
    client = shared_client(qdrant_config(settings))
    served = LibraryPages("lib", store, Words(), external=qdrant_factory(client, "lib"))
    assert served.search("revenue growth", k=1)[0].locator == "pub#page=1"
    with pytest.raises(ValueError, match="RAGSPINE_INDEX_BACKEND=qdrant"):
        reindex_pages(store, Settings(), library="lib")
    other = Words()
    other.name = "another:model"
    LibraryPages("lib", store, other).store.put_pages(
        records("mixed", ["net income"]), other.embed_pages(["net income"]), encoder=other.name
    )
    with pytest.raises(ValueError, match="one encoder"):
        reindex_pages(store, settings, library="lib")


def test_reindex_cli_publishes_pages_when_visual_retrieval_is_on(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragspine.cli import main
    from ragspine_services.front.libraries import LibraryCatalog

    data = tmp_path / "data"
    library = LibraryCatalog(Settings(data_dir=str(data))).get("docs", create=True)
    pages_file = library.pages_file
    library.close()
    monkeypatch.setenv("RAGSPINE_INDEX_BACKEND", "qdrant")
    monkeypatch.setenv("RAGSPINE_QDRANT_URL", str(tmp_path / "q"))
    monkeypatch.setenv("RAGSPINE_RETRIEVAL_MODE", "bm25")
    monkeypatch.setenv("RAGSPINE_VISUAL_EMBEDDER", "colqwen2")
    assert main(["reindex", "--library", "docs", "--data-dir", str(data)]) == 0
    assert "pages" not in capsys.readouterr().out  # no page table: nothing published, nothing created
    LibraryPages("docs", VisualPageStore(pages_file), Words()).replace_doc(
        records("pub", PUBLIC, library="docs"), doc_id="pub"
    )
    assert main(["reindex", "--library", "docs", "--data-dir", str(data)]) == 0
    assert "published 1 changed document(s) of pages into Qdrant collection 'ragspine_lib_docs__pages'" in (
        capsys.readouterr().out
    )


def test_a_collection_dropped_by_another_job_serves_nothing_then_is_republished(client: Any) -> None:
    pages = shelf("qdrant", client)
    pages.replace_doc(records("pub", PUBLIC), doc_id="pub")
    assert isinstance(pages.external, QdrantPageIndex) and pages.search("revenue growth", k=1)
    client.delete_collection(pages.external.collection)  # e.g. `ragspine reindex --recreate` elsewhere
    assert pages.search("revenue growth", k=3) == []
    pages.replace_doc(records("pub", PUBLIC[:2]), doc_id="pub")
    assert [x.locator for x in pages.search("revenue growth", k=3)] == ["pub#page=1", "pub#page=2"]


def test_every_index_on_one_local_client_shares_one_call_lock(client: Any) -> None:
    from ragspine.retrieval.qdrant import QdrantRetriever

    pages = shelf("qdrant", client)
    text = QdrantRetriever([], client=client, config=QdrantConfig(), library="lib")
    other = QdrantClient(location=":memory:")
    assert isinstance(pages.external, QdrantPageIndex)
    assert pages.external._call_lock is text._call_lock  # local mode is not thread-safe
    assert shelf("qdrant", other).external._call_lock is not text._call_lock  # type: ignore[union-attr]
    other.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_nothing_stays_pending_after_writes(backend: str, client: Any) -> None:
    pages = shelf(backend, client)
    pages.replace_doc(records("pub", PUBLIC), doc_id="pub")
    pages.remove_doc("pub")
    assert pages._dirty == set()  # the in-process index never collects documents to publish
