"""The gRPC front answers exactly what the library's pipeline answers over the same store."""

from __future__ import annotations

from ragspine.retrieval.pipeline import RetrievalPipeline, RetrieveRequest
from ragspine_services._gen import retrieval_pb2 as pb
from tests.service.helpers import SAMPLE

QUESTIONS = ["how long does the battery last", "remote work policy", "工厂安全", "quarterly revenue"]


def test_grpc_and_in_process_pipeline_give_the_same_answer(make_front) -> None:
    front = make_front()
    docs = [
        pb.Document(doc_id=p.stem, text=p.read_text(encoding="utf-8"), sensitivity="INTERNAL")
        for p in sorted(SAMPLE.glob("*.md"))
    ]
    front.stub.Ingest(pb.IngestRequest(library="demo", documents=docs), timeout=30)
    front.stub.Ingest(pb.IngestRequest(library="other", documents=docs[:1]), timeout=30)
    catalog = front.parts.catalog
    for libraries in (["demo"], ["demo", "other"]):
        pipeline = RetrievalPipeline([catalog.get(name) for name in libraries])
        for question in QUESTIONS:
            wire = front.stub.Retrieve(
                pb.RetrieveRequest(query=question, libraries=libraries, top_k=5), timeout=10
            )
            local = pipeline.run(RetrieveRequest(question, top_k=5, mode="lexical")).snippets
            assert [(s.library_id, s.chunk_id) for s in wire.snippets] == [
                (s["library_id"], s["chunk_id"]) for s in local
            ]
            assert [s.scores.fused for s in wire.snippets] == [s["scores"]["fused"] for s in local]
