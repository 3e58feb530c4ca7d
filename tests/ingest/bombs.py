"""Small PDFs that expand into a lot of text or pixels (the resource-limit attack cases)."""

from __future__ import annotations

import io
import zlib


def _pdf(objects: list[bytes]) -> bytes:
    """Assemble numbered objects (1-based, object 1 is the catalog) into a PDF with a valid xref."""
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def text_bomb(pages: int, lines_per_page: int, line: bytes = b"ZIP BOMB TEXT " * 8) -> bytes:
    """``pages`` pages, each drawing ``lines_per_page`` copies of ``line`` from one Flate stream: the file
    stays small while its text layer is ``pages * lines_per_page * len(line)`` characters."""
    body = b"BT /F1 0.5 Tf 0.6 TL 10 780 Td " + (b"(" + line + b") Tj T* ") * lines_per_page + b"ET"
    content = zlib.compress(body, 9)
    objects: list[bytes] = [b"", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    content_id = len(objects) + 1
    header = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(content)
    objects.append(header + content + b"\nendstream")
    kids = []
    for _ in range(pages):
        kids.append(len(objects) + 1)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> >> >>" % content_id
        )
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        pages,
    )
    return _pdf(objects)


def blank_pages(count: int, width_pt: float = 612, height_pt: float = 792) -> bytes:
    """``count`` empty pages of the given size (a few hundred bytes per page)."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    for _ in range(count):
        kids.append(len(objects) + 1)
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %g %g] >>" % (width_pt, height_pt))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), count)
    return _pdf(objects)
