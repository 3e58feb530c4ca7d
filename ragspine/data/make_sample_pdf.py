"""Write ``harvest_arm_safety_summary.pdf``: a one-page PDF with a text layer, built byte by byte.

Run ``python ragspine/data/make_sample_pdf.py`` to regenerate it in ``sample_corpus/`` (the script lives
beside that folder, not in it, since every file of the folder is a document). The file uses the standard
Helvetica font (no embedding) and ASCII text only, so every PDF reader shows the same text.
``build_text_pdf`` is also what tests use to make PDFs of their own (for example with an ``/Encrypt`` entry
added).
"""

from __future__ import annotations

from pathlib import Path

PARAGRAPHS = (
    "Harvest Arm H2 Safety Summary",
    "Stop the arm with the red emergency button on the base before any maintenance.",
    "Keep a clear zone of one and a half metres around the arm while it is picking.",
    "Only trained Lumenfield technicians may open the gripper housing.",
)


def _escape(text: str) -> str:
    if not text.isascii():
        raise ValueError("the sample PDF generator writes ASCII text only")
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def build_text_pdf(paragraphs: tuple[str, ...] | list[str], *, trailer_extra: str = "") -> bytes:
    """A single-page PDF showing each paragraph on its own line, separated by an empty line.

    ``trailer_extra`` is inserted verbatim into the trailer dictionary (e.g. an ``/Encrypt`` entry).
    """
    lines = ["BT", "/F1 12 Tf", "16 TL", "72 740 Td"]
    for i, paragraph in enumerate(paragraphs):
        if i:
            lines.append("T*")  # an empty line keeps paragraphs apart in the extracted text
        lines.append(f"({_escape(paragraph)}) Tj T*")
    lines.append("ET")
    stream = "\n".join(lines).encode("ascii")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R {trailer_extra}>>\n".encode()
    out += f"startxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def main() -> None:
    target = Path(__file__).resolve().parent / "sample_corpus" / "harvest_arm_safety_summary.pdf"
    target.write_bytes(build_text_pdf(PARAGRAPHS))
    print(target)


if __name__ == "__main__":
    main()
