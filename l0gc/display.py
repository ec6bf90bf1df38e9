"""Text for terminals from strings l0gc did not write itself (pure, no I/O).

Partition names, owners, pause reasons and error messages come from etcd or a bucket
listing, so they may hold terminal escape sequences (``\\x1b[31m``), carriage returns,
bidirectional overrides or lone surrogates. Printed raw they can recolour or rewrite
an operator's terminal, or crash the write. `printable` is the one helper every text
output uses for such strings: printable characters are kept (non-ASCII letters too),
every other character becomes a backslash escape as `repr` writes it, without quotes.
JSON output needs none of this: `json.dumps` escapes control characters itself.
"""

from __future__ import annotations

__all__ = ["printable"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """`text` with each non-printable character as a backslash escape: 'a\\x1b[31m'."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
