"""A deterministic mixed zh/en corpus with metadata and RESTRICTED documents, shared by the packs."""

from __future__ import annotations

import random

from ragspine.retrieval.chunking.types import DocumentMeta

EN_WORDS = [
    "revenue",
    "growth",
    "margin",
    "decline",
    "supplier",
    "factory",
    "shipment",
    "quarter",
    "guidance",
    "inventory",
    "battery",
    "chip",
    "demand",
    "pricing",
    "export",
    "tariff",
    "cost",
    "outlook",
    "cash",
    "dividend",
    "churn",
    "subscriber",
    "cloud",
]
ZH_WORDS = [
    "营收",
    "下滑",
    "毛利率",
    "供应商",
    "工厂",
    "出货",
    "季度",
    "库存",
    "电池",
    "芯片",
    "需求",
    "定价",
    "关税",
]
ENTITIES = ["ACME_CN", "ACME_US", "GLOBEX", "INITECH"]
PERIODS = ["2022Q4", "2023Q1", "2023Q2", "2023Q3", "2024Q1"]
TOPICS = ["finance", "operations", "risk"]

QUERIES = [
    "revenue decline",
    "为什么营收下滑",
    "battery supplier shipment",
    "毛利率 quarter guidance",
    "芯片需求",
    "tariff export cost outlook",
    "cloud subscriber churn",
]


def _paragraph(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return " ".join(rng.choice(EN_WORDS) for _ in range(rng.randint(8, 30))) + "."
    return "".join(rng.choice(ZH_WORDS) for _ in range(rng.randint(5, 20))) + "。"


def make_documents(
    n_docs: int = 40, *, seed: int = 7, restricted_every: int = 0
) -> list[tuple[str, DocumentMeta]]:
    """``n_docs`` documents with 1–5 paragraphs each; every ``restricted_every``-th one is RESTRICTED."""
    rng = random.Random(seed)
    docs = []
    for i in range(n_docs):
        text = "\n\n".join(_paragraph(rng) for _ in range(rng.randint(1, 5)))
        restricted = restricted_every > 0 and i % restricted_every == restricted_every - 1
        meta = DocumentMeta(
            doc_id=f"{'secret' if restricted else 'doc'}-{i:03d}",
            title=f"Report {i}",
            topic=rng.choice(TOPICS),
            entity=rng.choice(ENTITIES),
            period=rng.choice(PERIODS),
            language="zh" if "。" in text else "en",
            sensitivity="RESTRICTED" if restricted else rng.choice(["INTERNAL", "PUBLIC"]),
        )
        docs.append((text, meta))
    return docs
