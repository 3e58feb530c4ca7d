"""Zip packages: the guard every zip-based format passes first, and archives expanded into members.

Office files (.docx, .pptx, .xlsx) and EPUB books are zip packages, and a .zip archive holds documents of
its own. Before any of them is read, ``check_zip`` refuses one whose entries would unpack beyond the
decompression-ratio limit (a zip bomb) or hold more than ``MAX_MEMBERS`` entries. ``archive_members``
gives an archive's files as ``(path, bytes)``, in name order, without folders, hidden files or macOS
resource forks; each becomes its own document, its doc id the archive's plus ``/`` and the member path.
"""

from __future__ import annotations

import io
import zipfile

from ragspine.ingest.limits import RATIO_FLOOR_CHARS, IngestLimits, LimitExceededError

MAX_MEMBERS = 10_000


def _open(data: bytes, *, source: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ValueError(f"{source} is not a readable zip package ({exc})") from None


def check_zip(data: bytes, *, source: str, limits: IngestLimits | None) -> None:
    """Refuse a zip package that would unpack past the limits (``LimitExceededError``) or is no zip."""
    package = _open(data, source=source)
    entries = package.infolist()
    if len(entries) > MAX_MEMBERS:
        raise LimitExceededError(f"{source} holds {len(entries)} entries; at most {MAX_MEMBERS} are read")
    unpacked = sum(e.file_size for e in entries)
    ratio = limits.max_decompression_ratio if limits is not None else IngestLimits().max_decompression_ratio
    if unpacked > RATIO_FLOOR_CHARS and unpacked > ratio * max(len(data), 1):
        raise LimitExceededError(
            f"{source} unpacks {len(data)} bytes into {unpacked} bytes, a ratio above {ratio:g} (limit "
            "max_decompression_ratio, set RAGSPINE_MAX_DECOMPRESSION_RATIO)"
        )


def _skipped(name: str) -> bool:
    parts = name.split("/")
    return name.endswith("/") or parts[0] == "__MACOSX" or any(p.startswith(".") for p in parts if p)


def archive_members(
    data: bytes, *, source: str, limits: IngestLimits | None = None
) -> list[tuple[str, bytes]]:
    """The files of a .zip archive as ``(path, bytes)`` (see the module docstring); ``ValueError`` for an
    archive that cannot be read (encrypted members included), ``LimitExceededError`` past the limits."""
    check_zip(data, source=source, limits=limits)
    package = _open(data, source=source)
    members = []
    for entry in sorted(package.infolist(), key=lambda e: e.filename):
        if _skipped(entry.filename):
            continue
        if entry.flag_bits & 0x1:
            raise ValueError(f"{source}: member {entry.filename!r} is encrypted; unpack it first")
        try:
            members.append((entry.filename, package.read(entry)))
        except (zipfile.BadZipFile, OSError, RuntimeError) as exc:
            raise ValueError(f"{source}: member {entry.filename!r} cannot be read ({exc})") from None
    if not members:
        raise ValueError(f"{source} holds no files")
    return members
