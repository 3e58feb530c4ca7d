"""Mail: RFC 822 messages (.eml) and Outlook messages (.msg)."""

from __future__ import annotations

import io
from email import policy
from email.parser import BytesParser

from ragspine.ingest.formats import blocks_text, require
from ragspine.ingest.formats.web import html_blocks


def eml_text(data: bytes, *, source: str) -> tuple[str, str]:
    """Text and title (the subject) of an .eml: From / To / Date / Subject, then the plain-text body (the
    HTML body read as text when there is no plain one); attachments are named, not read."""
    message = BytesParser(policy=policy.default).parsebytes(data)
    if not message.keys():
        raise ValueError(f"{source} is not an e-mail message (no headers)")
    header = [f"{name}: {message[name]}" for name in ("From", "To", "Date", "Subject") if message[name]]
    body = message.get_body(preferencelist=("plain", "html"))
    text = ""
    if body is not None:
        content = body.get_content()
        text = blocks_text(html_blocks(content)[0]) if body.get_content_subtype() == "html" else str(content)
    attached = [part.get_filename() for part in message.iter_attachments() if part.get_filename()]
    if attached:
        header.append("Attachments: " + ", ".join(str(a) for a in attached))
    paragraphs = [p for p in str(text).replace("\r\n", "\n").split("\n\n")]
    return blocks_text(["\n".join(header), *paragraphs]), str(message["Subject"] or "")


# MAPI property streams of an Outlook message (Unicode string properties, tag + 001F).
_SUBJECT, _BODY, _SENDER, _TO = (
    "__substg1.0_0037001F",
    "__substg1.0_1000001F",
    "__substg1.0_0C1A001F",
    "__substg1.0_0E04001F",
)


def msg_text(data: bytes, *, source: str) -> tuple[str, str]:
    """Text and title (the subject) of an Outlook .msg: From / To / Subject and the plain-text body."""
    olefile = require("olefile")
    if not olefile.isOleFile(io.BytesIO(data)):
        raise ValueError(f"{source} is not an Outlook message (not an OLE compound file)")
    ole = olefile.OleFileIO(io.BytesIO(data))
    try:

        def read(stream: str) -> str:
            if not ole.exists(stream):
                return ""
            return ole.openstream(stream).read().decode("utf-16-le", errors="replace").rstrip("\x00").strip()

        subject, body, sender, to = read(_SUBJECT), read(_BODY), read(_SENDER), read(_TO)
    finally:
        ole.close()
    if not (subject or body):
        raise ValueError(f"{source} holds no subject or plain-text body")
    header = [
        f"{name}: {value}" for name, value in (("From", sender), ("To", to), ("Subject", subject)) if value
    ]
    return blocks_text(["\n".join(header), *body.replace("\r\n", "\n").split("\n\n")]), subject
