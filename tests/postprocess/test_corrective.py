"""Corrective retrieval: the bounded grade → act loop (drop filters → rewrite → refuse)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragspine.agent.security_gate import SecurityGate
from ragspine.common.choices import strict_choices
from ragspine.retrieval.corrective import (
    ACTION_ACCEPT,
    ACTION_DROP_FILTERS,
    ACTION_REFUSE,
    ACTION_REWRITE,
    CorrectiveRetriever,
    GradeAction,
    LexicalOverlapGrader,
    glossary_rewrite,
    make_corrective_retriever,
)
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from ragspine.settings import Settings
from tests.agent.conftest import build_store


class Recording:
    def __init__(self, base: Any) -> None:
        self.base = base
        self.calls: list[tuple[str, Any]] = []

    def retrieve(self, query: str, *, filters: Any = None, top_k: int = 50) -> list[dict[str, Any]]:
        self.calls.append((query, filters))
        return self.base.retrieve(query, filters=filters, top_k=top_k)


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Recording]:
    index, store = build_store(tmp_path / "chunks.db")
    try:
        yield Recording(NarrativeIndexRetriever(index, retry_without_filters=False))
    finally:
        store.close()


def test_grader() -> None:
    grader = LexicalOverlapGrader()
    assert grader.grade("battery supplier", []) == 0.0
    assert grader.grade("the of", [{"text": "x"}]) == 1.0
    assert grader.grade("battery supplier pricing", [{"text": "Battery supplier up"}]) == pytest.approx(2 / 3)
    assert grader.grade("battery", [{"text": "a"}, {"text": "b"}, {"text": "c"}, {"text": "battery"}]) == 0.0


def test_good_context_is_accepted_in_one_retrieval(base: Recording) -> None:
    result = CorrectiveRetriever(base).retrieve_staged("battery supplier shipment", top_k=3)
    assert base.calls == [("battery supplier shipment", None)]
    (action,) = result.reports[-1].actions
    assert action == GradeAction(ACTION_ACCEPT, 1.0, 2) and len(result.snippets) == 2  # bat-1, bat-2


def test_filters_are_dropped_first(base: Recording) -> None:
    crag = CorrectiveRetriever(base)
    result = crag.retrieve_staged("battery supplier shipment", filters={"entity": "ACME_HK"}, top_k=3)
    assert base.calls == [
        ("battery supplier shipment", {"entity": "ACME_HK"}),
        ("battery supplier shipment", None),
    ]
    assert [a.action for a in result.reports[-1].actions] == [ACTION_DROP_FILTERS, ACTION_ACCEPT]
    assert result.snippets and not result.reports[-1].refused


def test_rewrite_then_refuse_within_two_retries(base: Recording) -> None:
    rewrites = iter(["battery zeppelin", "battery zeppelin quantum", "never used"])
    crag = CorrectiveRetriever(base, min_grade=0.9, query_rewriter=lambda q: next(rewrites))
    result = crag.retrieve_staged("zeppelin quantum battery", filters={"entity": "ACME_HK"}, top_k=3)
    assert len(base.calls) == 3  # the first retrieval plus at most two corrective retries
    report = result.reports[-1]
    assert [a.action for a in report.actions] == [ACTION_DROP_FILTERS, ACTION_REWRITE, ACTION_REFUSE]
    assert report.refused and result.snippets == [] and report.variants_tried == ["battery zeppelin"]
    assert crag.retrieve("zeppelin quantum battery", top_k=3) == []


def test_no_new_rewrite_refuses_at_once(base: Recording) -> None:
    crag = CorrectiveRetriever(base, query_rewriter=lambda q: q)
    report = crag.retrieve_staged("zeppelin quantum", top_k=3).reports[-1]
    assert len(base.calls) == 1 and [a.action for a in report.actions] == [ACTION_REFUSE]


def test_a_rewrite_naming_a_competitor_is_refused(base: Recording) -> None:
    crag = CorrectiveRetriever(
        base, query_rewriter=lambda q: "Globex battery", security_gate=SecurityGate.from_profile()
    )
    report = crag.retrieve_staged("zeppelin quantum", top_k=3).reports[-1]
    assert base.calls == [("zeppelin quantum", None)]
    assert report.variants_refused == [("Globex battery", "GLOBEX")] and report.refused


def test_max_retries_zero_only_grades(base: Recording) -> None:
    report = CorrectiveRetriever(base, max_retries=0).retrieve_staged("zeppelin", top_k=3).reports[-1]
    assert len(base.calls) == 1 and report.refused


def test_default_rewrite_is_deterministic() -> None:
    assert glossary_rewrite("what is the margin of the battery unit") == "margin battery unit"
    assert (
        glossary_rewrite("what is the revenue of the battery unit") == "what is the 营收 of the battery unit"
    )
    assert glossary_rewrite("营收") != "营收"  # the controlled code variant
    assert glossary_rewrite("营收") == glossary_rewrite("营收")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_grade": 1.5}, "min_grade"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_retries": "2"}, "max_retries"),
    ],
)
def test_bad_arguments(base: Recording, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CorrectiveRetriever(base, **kwargs)


def test_max_retries_above_the_bound_is_clamped_and_last_actions_are_kept(
    base: Recording, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="ragspine.retrieval.corrective"):
        crag = CorrectiveRetriever(base, max_retries=5, min_grade=0.99)
    assert crag.max_retries == 2 and "above the bound" in caplog.text
    assert crag.last_actions == []
    report = crag.retrieve_staged("zeppelin", top_k=3).reports[-1]
    # The published trace: the first retrieval, each corrective attempt (with the grade of what it got),
    # then the refusal with no snippets; the wire's report keeps its own vocabulary.
    trace = [a.action for a in crag.last_actions]
    assert trace[0] == "retrieve" and trace[-1] == "refuse" and crag.last_actions[-1].snippet_count == 0
    assert set(trace[1:-1]) <= {"drop_filters", "rewrite_query"}
    assert [a.action for a in report.actions][-1] == "refuse"
    assert {a.action for a in report.actions} <= {"drop_filters", "rewrite", "refuse"}
    # Never more than two acting steps, whatever was asked for.
    assert len(trace) - 2 <= 2 and len(base.calls) == len(trace) - 1


def test_the_published_trace_and_its_emission(base: Recording, monkeypatch: pytest.MonkeyPatch) -> None:
    import ragspine.retrieval.corrective as corrective

    emitted: list[dict[str, object]] = []
    monkeypatch.setattr(corrective, "emit_trace", lambda event, **fields: emitted.append(fields))
    crag = CorrectiveRetriever(base, min_grade=0.0)
    crag.retrieve("battery", top_k=3)
    assert [a.action for a in crag.last_actions] == ["retrieve"]  # graded well at once: nothing else
    assert emitted == [
        {"corrective_actions": ["retrieve"], "corrective_grades": [round(crag.last_actions[0].grade, 4)]}
    ]
    CorrectiveRetriever(base, emit=False).retrieve("battery", top_k=3)
    assert len(emitted) == 1  # emit=False sends nothing
    assert LexicalOverlapGrader().grade("revenue", [{"content": "revenue grew"}]) == 1.0  # text, else content


def test_factory(base: Recording) -> None:
    assert make_corrective_retriever(base, "none") is base
    assert make_corrective_retriever(base, settings=Settings()) is base
    assert isinstance(make_corrective_retriever(base, "on", min_grade=0.2), CorrectiveRetriever)
    assert isinstance(
        make_corrective_retriever(base, settings=Settings(corrective="crag")), CorrectiveRetriever
    )
    with strict_choices(), pytest.raises(ValueError, match="choices: none, on"):
        make_corrective_retriever(base, "sometimes")


def test_emit_logs_grades_and_actions_never_text(base: Recording, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="ragspine.retrieval.corrective"):
        CorrectiveRetriever(base, emit=False).retrieve("zeppelin quantum", top_k=3)
        assert caplog.records == []
        CorrectiveRetriever(base).retrieve("zeppelin quantum", top_k=3)
    messages = [r.getMessage() for r in caplog.records]
    assert messages and all("zeppelin" not in m for m in messages)
    assert any("refuse" in m for m in messages)


def test_blank_query_is_rejected(base: Recording) -> None:
    with pytest.raises(ValueError, match="query"):
        CorrectiveRetriever(base).retrieve(" ")
    assert base.calls == []
