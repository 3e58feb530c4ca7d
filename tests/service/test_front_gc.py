"""The front moves what start-up loaded out of the collector's generations while it serves (full
collections of a large process otherwise stop every query thread for 100-380 ms), and gives it back when
it stops, so a process that runs fronts in turn keeps none of them for good."""

from __future__ import annotations

import gc
from typing import Any

from ragspine_services._gen import retrieval_pb2 as pb
from tests.service.helpers import sample_documents


def test_the_front_freezes_start_up_objects_while_it_serves_and_unfreezes_them_on_stop(
    make_front: Any,
) -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    front = make_front(mode="lexical")
    assert front.running.froze_gc
    frozen = gc.get_freeze_count()
    assert frozen > 1000  # modules, the catalog, the server: far more than a handful of objects
    front.stub.Ingest(pb.IngestRequest(library="demo", documents=sample_documents()), timeout=30)
    response = front.stub.Retrieve(pb.RetrieveRequest(query="battery swap", top_k=3), timeout=10)
    assert not response.degraded
    front.running.stop(0)
    assert gc.get_freeze_count() == 0
