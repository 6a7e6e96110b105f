"""Jupyter wire-protocol frames, signed and verified, with nothing else on the hot path.

``jupyter_client.session.Session`` does more than the runtime needs on every
tool call (date parsing of every header, deep copies, digest history); this is
the lean subset: sign and build ``[<IDS|MSG>, hmac, header, parent, metadata,
content]``, verify and decode the same. Unsigned, mis-signed or malformed
frames decode to ``None``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

DELIMITER = b"<IDS|MSG>"
PROTOCOL_VERSION = "5.3"
ONE_LINE_CHARACTERS = 200
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


@dataclass(frozen=True, slots=True)
class Incoming:
    """A verified, decoded message from the kernel. ``size`` counts its raw frames."""

    msg_type: str
    parent_id: str | None
    content: dict[str, Any]
    size: int


class WireCodec:
    """Signs outgoing and verifies incoming frames with one kernel's key."""

    def __init__(self, key: bytes, signature_scheme: str = "hmac-sha256") -> None:
        algorithm = signature_scheme.removeprefix("hmac-")
        if algorithm not in hashlib.algorithms_available:
            raise ValueError(f"unsupported signature scheme {signature_scheme!r}")
        self._auth = hmac.new(key, digestmod=algorithm) if key else None
        self._session = uuid.uuid4().hex

    def _sign(self, parts: list[bytes]) -> bytes:
        if self._auth is None:
            return b""
        mac = self._auth.copy()
        for part in parts:
            mac.update(part)
        return mac.hexdigest().encode()

    def encode(self, msg_type: str, content: dict[str, Any]) -> tuple[str, list[bytes]]:
        """Frames for a request to the kernel, and its ``msg_id``."""
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id, "msg_type": msg_type, "username": "dsh-jupyter",
            "session": self._session, "date": datetime.now(UTC).isoformat(),
            "version": PROTOCOL_VERSION,
        }
        parts = [_pack(header), b"{}", b"{}", _pack(content)]
        return msg_id, [DELIMITER, self._sign(parts), *parts]

    def decode(self, frames: list[bytes]) -> Incoming | None:
        try:
            start = frames.index(DELIMITER) + 1
        except ValueError:
            return None
        if len(frames) < start + 5:
            return None
        signature, *parts = frames[start:start + 5]
        if self._auth is not None and not hmac.compare_digest(signature, self._sign(parts)):
            return None
        try:
            # surrogateescape: ipykernel sends a program's text that holds a file name's
            # undecodable bytes (os.listdir's str) as those raw bytes; they arrive as
            # U+DC80..U+DCFF, which the result escapes (``_safe_text``), instead of the
            # message being dropped.
            header, parent, content = (json.loads(parts[i].decode("utf-8", "surrogateescape"))
                                       for i in (0, 1, 3))
        except (ValueError, RecursionError):
            return None
        if not (isinstance(header, dict) and isinstance(content, dict)):
            return None
        msg_type = header.get("msg_type")
        if not isinstance(msg_type, str):
            return None
        parent_id = parent.get("msg_id") if isinstance(parent, dict) else None
        return Incoming(msg_type, parent_id if isinstance(parent_id, str) else None, content,
                        sum(len(frame) for frame in frames))


def _pack(value: dict[str, Any]) -> bytes:
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8", "surrogateescape")


def one_line(text: object) -> str:
    """Kernel-supplied text (an exception's name or value, say) as one short line without
    terminal escapes: at most :data:`ONE_LINE_CHARACTERS`, white space folded."""
    line = " ".join(_ANSI.sub("", str(text)).split())
    if len(line) <= ONE_LINE_CHARACTERS:
        return line
    return line[:ONE_LINE_CHARACTERS - 1] + "…"
