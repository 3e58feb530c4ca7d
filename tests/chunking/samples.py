# ruff: noqa: E501 (sample documents keep their real line lengths)
"""Sample documents for the structural chunkers: a law, an FAQ and a book chapter in Chinese and English,
plus the sample corpus (its PDF parsed by the ingest parser). Lines follow each other without blank lines
where real documents do (statutes, FAQs), and with them where prose does."""

from __future__ import annotations

import json
from pathlib import Path

from ragspine.ingest.parsers import parse_file
from ragspine.retrieval.chunking.types import DocumentMeta

CORPUS = Path(__file__).resolve().parents[2] / "ragspine" / "data" / "sample_corpus"

ZH_LAW = """流明田机器人安全生产条例

第一章 总则
第一条 为了加强机器人生产安全管理，防止和减少生产安全事故，保障人民群众生命和财产安全，制定本条例。
第二条 在本市行政区域内从事农业机器人生产、调试和维修活动的单位，适用本条例。
第二章 安全保障
第三条 生产经营单位应当具备本条例和有关法律、法规规定的安全生产条件；不具备安全生产条件的，不得从事生产经营活动。
第四条 机械臂调试期间，工作区域应当设置围栏。调试人员进入围栏前，应当按下急停按钮并挂上个人锁。
第五条 生产经营单位应当每月组织一次消防演习。
第三章 法律责任
第六条 违反本条例第四条规定的，由安全生产监督管理部门责令限期改正，可以处五万元以下的罚款。
"""

EN_LAW = """Harvest Robotics Safety Act

Chapter 1 General Provisions
Article 1 This Act sets the minimum safety duties of anyone who builds, tests or services an agricultural robot in the Province.
Article 2 This Act applies to every employer with at least one robot in operation; it does not apply to research prototypes that never leave a laboratory.
Chapter 2 Duties of Employers
Article 3 An employer shall fence the working area of a robot arm during commissioning. No person may enter the fenced area until the emergency stop is pressed and a personal lock is applied.
Article 4 An employer shall hold a fire drill every month and keep a record of it for three years.
Chapter 3 Penalties
Article 5 A breach of Article 3 is punishable by a fine of up to fifty thousand euros.
"""

EN_FAQ = """# Harvest Arm H2 FAQ
Q: How long does the battery last?
A: About ten hours, which covers one full picking shift.
The battery can be swapped in under two minutes without tools.
Q: Which crops can the H2 pick?
A: Greenhouse tomatoes today; sweet peppers follow in 2027.
Can I buy spare grippers separately?
Yes. Spare grippers are sold through the service portal and ship within five working days.
"""

ZH_FAQ = """# 收获臂 H2 常见问题
问：电池可以使用多久？
答：大约十个小时，可以覆盖一个完整的采摘班次。
更换电池不需要工具，两分钟内即可完成。
问：H2 可以采摘哪些作物？
答：目前支持温室番茄，甜椒将于二〇二七年支持。
备用夹爪可以单独购买吗？
可以。备用夹爪通过服务门户销售，五个工作日内发货。
"""

ZH_BOOK = """第一章 种子

清晨的温室里，第一排番茄已经发红。工程师林岚把收获臂推到过道尽头，打开了摄像头。

机械臂缓缓抬起，像一只谨慎的手。它停在一串番茄前，判断哪一颗已经成熟。

第二章 收获

到了中午，收获臂已经采下一千多颗番茄。林岚在笔记本上记下破损率：百分之零点七。

她想，明年也许可以试试甜椒。
"""

EN_BOOK = """## Chapter 1: Seeds

In the early morning the first row of tomatoes in the greenhouse had turned red. Lin Lan pushed the harvest arm to the end of the aisle and switched on its camera.

The arm rose slowly, like a careful hand. It stopped in front of a truss and decided which fruit was ripe.

## Chapter 2: Harvest

By noon the arm had picked more than a thousand tomatoes. Lin Lan wrote the bruising rate in her notebook: 0.7 percent.

Next year, she thought, they might try sweet peppers.
"""


def _meta(doc_id: str, language: str, **extra: str) -> DocumentMeta:
    return DocumentMeta(
        doc_id=doc_id, title=doc_id, language=language, source_locator_prefix=f"{doc_id}.txt", **extra
    )


FAMILY_SAMPLES: dict[str, tuple[str, DocumentMeta]] = {
    "zh_law": (ZH_LAW, _meta("zh-law", "zh")),
    "en_law": (EN_LAW, _meta("en-law", "en")),
    "en_faq": (EN_FAQ, _meta("en-faq", "en")),
    "zh_faq": (ZH_FAQ, _meta("zh-faq", "zh")),
    "zh_book": (ZH_BOOK, _meta("zh-book", "zh")),
    "en_book": (EN_BOOK, _meta("en-book", "en")),
}


def corpus_samples() -> dict[str, tuple[str, DocumentMeta]]:
    """Every sample-corpus document (the PDF through the ingest parser) with its manifest metadata."""
    manifest = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))
    out: dict[str, tuple[str, DocumentMeta]] = {}
    for doc in manifest["documents"]:
        parsed = parse_file(CORPUS / doc["path"])
        fields = {
            k: doc[k] for k in ("doc_id", "title", "topic", "entity", "geography", "period", "language")
        }
        meta = DocumentMeta(**fields, sensitivity=doc["sensitivity"], source_locator_prefix=doc["path"])
        out[doc["path"]] = (parsed.text, meta)
    return out


def all_samples() -> dict[str, tuple[str, DocumentMeta]]:
    return {**FAMILY_SAMPLES, **corpus_samples()}
