"""Test helpers for visual page retrieval: hand-made PDFs and a deterministic word-level fake encoder."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np


def _pdf(objects: list[bytes], trailer_extra: bytes = b"") -> bytes:
    """Serialise numbered objects into a PDF with a correct cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        trailer_extra,
        xref,
    )
    return bytes(out)


def make_text_pdf(
    pages: Sequence[str], *, width: int = 612, height: int = 792, encrypt: bool = False
) -> bytes:
    """A PDF with one line of Helvetica text per page (US letter by default).

    ``encrypt=True`` adds a standard-security-handler dictionary whose user-password check fails for the
    empty password, which is what a password-protected file looks like to a reader.
    """
    n = len(pages)
    page_ids = [3 + 2 * i for i in range(n)]
    font_id = 3 + 2 * n
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % p for p in page_ids), n),
    ]
    for i, text in enumerate(pages):
        stream = b"BT /F1 24 Tf 72 %d Td (%s) Tj ET" % (height - 100, text.encode("latin-1"))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Contents %d 0 R "
            b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (width, height, page_ids[i] + 1, font_id)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    extra = b""
    if encrypt:
        objects.append(
            b"<< /Filter /Standard /V 1 /R 2 /Length 40 /P -44 "
            b"/O <" + b"11" * 32 + b"> /U <" + b"22" * 32 + b"> >>"
        )
        extra = b"/Encrypt %d 0 R /ID [<%s> <%s>] " % (len(objects), b"ab" * 16, b"ab" * 16)
    return _pdf(objects, extra)


class WordEncoder:
    """Fake VisualEncoder over "images" that are strings: one unit vector per word (hashed, 32-d).

    MaxSim between a query and a page then counts the query words the page contains, so rankings are
    predictable. Records every item it is asked to embed.
    """

    name = "words:test"
    dim = 32

    def __init__(self) -> None:
        self.page_inputs: list[object] = []
        self.query_inputs: list[str] = []

    @classmethod
    def vector(cls, word: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(word.lower().encode()).digest()[:4], "little")
        vec = np.random.default_rng(seed).standard_normal(cls.dim).astype(np.float32)
        return vec / np.linalg.norm(vec)

    def _embed(self, text: str) -> np.ndarray:
        return np.stack([self.vector(w) for w in text.split()])

    def embed_pages(self, images: Sequence[object]) -> list[np.ndarray]:
        self.page_inputs.extend(images)
        return [self._embed(str(image)) for image in images]

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        self.query_inputs.extend(texts)
        return [self._embed(text) for text in texts]


def make_image_only_pdf(n_pages: int = 2, *, width: int = 612, height: int = 792) -> bytes:
    """A PDF whose pages carry drawings but no text layer at all (what a scan looks like to a parser)."""
    page_ids = [3 + 2 * i for i in range(n_pages)]
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % p for p in page_ids), n_pages),
    ]
    for i in range(n_pages):
        stream = b"0 0 0 rg %d 100 200 %d re f" % (72 + 30 * i, 100 + 40 * i)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Contents %d 0 R >>"
            % (width, height, page_ids[i] + 1)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    return _pdf(objects)
