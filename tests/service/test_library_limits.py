"""Libraries are bounded: 300 libraries under ``ulimit -n 1024`` keep the front answering.

A ``ragspine serve all`` process runs with its open-file limit fixed at 1,024 (soft and hard, so raising
it to the hard limit at start changes nothing). 300 libraries are created over gRPC; the front keeps only
as many open as its descriptors allow (least recently used ones have their files closed and are opened
again on demand), so ListLibraries lists all 300, Retrieve answers from the first library (long since
closed) and from the last, and Info reports the limits. An idle library that was closed holds no file
descriptor. A query over more libraries than can be open is refused with a message saying what to do, and
so is a library beyond ``RAGSPINE_MAX_LIBRARIES``. Reverse proof: with eviction off
(``RAGSPINE_MAX_OPEN_LIBRARIES`` above the count), the same run exhausts the descriptors and calls fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services._gen import retrieval_pb2_grpc
from tests.service.bench_helpers import soak_limits

LIBRARIES = 300
FD_LIMIT = 1024


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str, Path]]:
    tmp = tmp_path_factory.mktemp("libraries")
    env = {"RAGSPINE_MAX_LIBRARIES": str(LIBRARIES)}
    with soak_limits().serve(tmp, env, fd_limit=FD_LIMIT) as (proc, address):
        yield proc, address, tmp


@pytest.mark.slow
def test_300_libraries_under_a_1024_descriptor_limit(crowded: tuple[Any, str, Path]) -> None:
    proc, address, tmp = crowded
    limits = soak_limits()
    assert set(limits.ingest_libraries(address, LIBRARIES)) == {"OK"}
    with grpc.insecure_channel(address) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        info = stub.Info(pb.RetrievalServiceInfoRequest(), timeout=10)
        assert info.max_open_files == FD_LIMIT and info.max_libraries == LIBRARIES
        assert 8 <= info.max_open_libraries < LIBRARIES and info.open_libraries <= info.max_open_libraries
        listed = stub.ListLibraries(pb.ListLibrariesRequest(), timeout=30).libraries
        assert len(listed) == LIBRARIES and all(lib.chunk_count == 1 for lib in listed)
        for name in ("lib-000", f"lib-{LIBRARIES - 1:03d}"):
            reply = stub.Retrieve(pb.RetrieveRequest(query="orchard note", libraries=[name]), timeout=30)
            assert reply.snippets and reply.snippets[0].library_id == name
        held = limits.library_fds(proc.pid, tmp / "data")
        # Only open libraries hold descriptors; every other one holds none.
        assert len(held) <= info.max_open_libraries, len(held)
        assert "lib-001" not in held
        assert len(os.listdir(f"/proc/{proc.pid}/fd")) < FD_LIMIT - 100
        # Searching every library at once cannot fit: a clear refusal, not an internal error.
        with pytest.raises(grpc.RpcError) as caught:
            stub.Retrieve(pb.RetrieveRequest(query="orchard note"), timeout=30)
        assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "name the libraries" in (caught.value.details() or "")
        # One library past RAGSPINE_MAX_LIBRARIES is refused, and nothing is created.
        doc = pb.Document(doc_id="note", text="One too many.")
        with pytest.raises(grpc.RpcError) as caught:
            stub.Ingest(pb.IngestRequest(library="lib-extra", documents=[doc]), timeout=30)
        assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "RAGSPINE_MAX_LIBRARIES" in (caught.value.details() or "")
        assert not (tmp / "data" / "libraries" / "lib-extra.sqlite").exists()


@pytest.mark.slow
def test_reverse_proof_without_eviction_descriptors_run_out(tmp_path: Path) -> None:
    limits = soak_limits()
    env = {"RAGSPINE_MAX_OPEN_LIBRARIES": str(LIBRARIES * 2)}
    with limits.serve(tmp_path, env, fd_limit=FD_LIMIT) as (_proc, address):
        codes = limits.ingest_libraries(address, LIBRARIES)
    assert set(codes) != {"OK"}, "every library stayed open and yet nothing ran out"
