"""The prompts of the query-time LLM stages, and the offline deterministic answers to them.

Every prompt holds the user's question and nothing retrieved: no snippet text, so no RESTRICTED text, can
reach a model through these stages. Each starts with a ``### ragspine:<task>`` header line, which is how
``DeterministicProvider`` recognises them and answers with :func:`deterministic_reply`.
"""

from __future__ import annotations

import re

TASK_HYDE = "hyde"
TASK_FUSION = "rag_fusion"
TASK_STEP_BACK = "step_back"
TASK_DECOMPOSE = "decompose"
TASK_CLASSIFY = "classify"
TASK_REWRITE = "rewrite"
_HEADER = "### ragspine:"
_QUESTION = "Question: "

_INSTRUCTIONS = {
    TASK_HYDE: "Write one short passage (3 sentences at most) that would answer the question. "
    "Answer with the passage only.",
    TASK_FUSION: "Write {n} different search queries for the question, one per line, no numbering.",
    TASK_STEP_BACK: "Write one more general question whose answer gives the background needed for the "
    "question. Answer with the question only.",
    TASK_DECOMPOSE: "Split the question into at most {n} self-contained sub-questions, one per line. "
    "A question that asks one thing stays as it is.",
    TASK_CLASSIFY: "Classify the question: 'simple' (a lookup), 'single' (one retrieval step) or "
    "'multi' (several parts or hops). Answer with the one word.",
    TASK_REWRITE: "Rewrite the question as a clearer search query. Answer with the query only.",
}


def chat_messages(system: str, user: str) -> list[dict[str, str]]:
    """The chat messages of one call: the ``system`` line, then the ``user`` prompt."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def build_prompt(task: str, question: str, *, n: int = 0) -> list[dict[str, str]]:
    """The chat messages of one stage: a system line and the ``### ragspine:<task>`` user prompt."""
    instruction = _INSTRUCTIONS[task].format(n=n)
    return chat_messages(
        "You help a retrieval system. Follow the format exactly.",
        f"{_HEADER}{task}\n{instruction}\n{_QUESTION}{question}",
    )


def parse_prompt(prompt: str) -> tuple[str, str, int] | None:
    """``(task, question, n)`` of a prompt built by :func:`build_prompt`, else None."""
    if not prompt.startswith(_HEADER):
        return None
    header, _, rest = prompt.partition("\n")
    task = header[len(_HEADER) :].strip()
    if task not in _INSTRUCTIONS:
        return None
    instruction, _, question = rest.partition("\n")
    if not question.startswith(_QUESTION):
        return None
    found = re.search(r"\d+", instruction)
    return task, question[len(_QUESTION) :], int(found.group()) if found else 0


def reply_lines(reply: str, *, limit: int) -> list[str]:
    """Non-blank lines of a model reply, bullets / numbering stripped, de-duplicated, at most ``limit``."""
    out: list[str] = []
    for line in reply.splitlines():
        text = re.sub(r"^\s*(?:[-*•]+|\d+[.)、:]|\(\d+\))\s*", "", line).strip().strip('"').strip()
        if text and text not in out:
            out.append(text)
        if len(out) >= limit:
            break
    return out


# Conjunctions that join the parts of a multi-part question.
_SPLIT = re.compile(r"\s*(?:[;；?？]|\band also\b|\band\b|\bversus\b|\bvs\.?|以及|并且|和|与|、|，)\s*", re.I)
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_'-]*|[\u3400-\u9fff]+")


def split_parts(question: str) -> list[str]:
    """The parts of a question at its conjunctions ('and', ';', '?', 和, 以及, ...), each >= 2 words long."""
    parts = [p.strip(" ,.") for p in _SPLIT.split(question)]
    return [p for p in parts if len(_WORD.findall(p)) >= 2 or (p and not p.isascii() and len(p) >= 2)]


_COMPARE = ("compare", "comparison", "difference between", "versus", " vs", "对比", "比较", "相比", "区别")


def heuristic_complexity(question: str) -> str:
    """``multi`` for a comparison or a question with several parts, ``simple`` for a short lookup (at
    most 3 words), else ``single``."""
    folded = question.casefold()
    if any(marker in folded for marker in _COMPARE) or len(split_parts(question)) > 1:
        return "multi"
    words = folded.split()
    if len(words) <= 3 and (len(words) > 1 or len(folded) <= 8):
        return "simple"
    return "single"


def deterministic_reply(prompt: str) -> str | None:
    """The offline answer to a stage prompt (None when ``prompt`` is not one): same input, same output.

    hyde → the question's longer words (a different text, so the probe path runs); rag_fusion → the
    question, then the question without each of its first words in turn; step_back → the question without
    numbers and years; decompose → the parts of the question at its conjunctions; classify → the heuristic
    class; rewrite → the question's words.
    """
    parsed = parse_prompt(prompt)
    if parsed is None:
        return None
    task, question, n = parsed
    words = _WORD.findall(question)
    if task == TASK_HYDE:
        return " ".join(w for w in words if not (w.isascii() and len(w) <= 3)) or question
    if task == TASK_FUSION:
        variants = [question] + [" ".join(words[:i] + words[i + 1 :]) for i in range(len(words))]
        return "\n".join([v for v in dict.fromkeys(variants) if v][: max(n, 1)])
    if task == TASK_STEP_BACK:
        general = [w for w in words if not any(ch.isdigit() for ch in w)]
        return " ".join(general) or question
    if task == TASK_DECOMPOSE:
        parts = split_parts(question)
        return "\n".join(parts[: max(n, 1)] if len(parts) > 1 else [question])
    if task == TASK_CLASSIFY:
        return heuristic_complexity(question)
    return " ".join(words) or question
