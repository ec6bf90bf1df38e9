"""Which object keys a DeleteObjects request can carry (pure, no I/O).

Design notes: docs/internals/rules.md, `gcd.rules.xmlkeys`.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["xml_unsafe_reason"]

# Characters outside XML 1.0's Char production, plus CR (normalised to LF by parsers).
_UNSAFE: Final = re.compile("[\x00-\x08\x0b-\x0c\x0d\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_unsafe_reason(key: str) -> str | None:
    """Why a DeleteObjects request cannot name `key` exactly, or None when it can."""
    found = _UNSAFE.search(key)
    if found is None:
        return None
    char = found.group()
    code = f"U+{ord(char):04X}"
    if char == "\r":
        return f"carriage return ({code}) at offset {found.start()}: XML turns it into a line feed"
    if "\ud800" <= char <= "\udfff":
        return f"lone surrogate ({code}) at offset {found.start()}: not encodable in UTF-8"
    return f"character {code} at offset {found.start()} is not allowed in XML 1.0"
