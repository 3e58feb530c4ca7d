"""Read a BEIR-layout dataset folder: corpus.jsonl, queries.jsonl, qrels.tsv (or qrels/test.tsv)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ragspine.ingest.beir import BeirDocument, iter_beir_jsonl


@dataclass
class BeirDataset:
    """A loaded dataset. ``qrels`` maps query id → {doc id: graded relevance}."""

    name: str
    corpus: list[BeirDocument]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    def judged_queries(self) -> list[tuple[str, str]]:
        """(query id, text) for every query that has at least one judgement, in query-file order."""
        return [(qid, text) for qid, text in self.queries.items() if qid in self.qrels]


def _jsonl(path: Path) -> Iterator[dict[str, object]]:
    with path.open("r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object per line")
            yield obj


def _qrels_path(folder: Path) -> Path:
    for candidate in (folder / "qrels.tsv", folder / "qrels" / "test.tsv"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{folder}: no qrels.tsv (or qrels/test.tsv); is this a BEIR-layout folder?")


def load_beir(folder: str | Path) -> BeirDataset:
    """Load a BEIR folder. Raises ``FileNotFoundError`` for missing files, ``ValueError`` for bad lines."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"dataset folder {root} does not exist")
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (root / name).is_file():
            raise FileNotFoundError(
                f"{root}: missing {name}; expected corpus.jsonl, queries.jsonl, qrels.tsv"
            )
    corpus = list(iter_beir_jsonl(root / "corpus.jsonl"))
    queries = {str(o["_id"]): str(o.get("text", "")) for o in _jsonl(root / "queries.jsonl") if "_id" in o}
    qrels: dict[str, dict[str, int]] = {}
    path = _qrels_path(root)
    with path.open("r", encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        for lineno, row in enumerate(reader, 1):
            if not row or (lineno == 1 and row[0] == "query-id"):
                continue
            if len(row) < 3:
                raise ValueError(f"{path}:{lineno}: expected query-id<TAB>corpus-id<TAB>score")
            try:
                score = int(float(row[2]))
            except ValueError:
                raise ValueError(f"{path}:{lineno}: score {row[2]!r} is not a number") from None
            qrels.setdefault(row[0], {})[row[1]] = score
    return BeirDataset(name=root.name, corpus=corpus, queries=queries, qrels=qrels)
