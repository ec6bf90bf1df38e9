"""Which object keys a DeleteObjects request can carry (pure, no I/O).

DeleteObjects names its keys in an XML 1.0 body. XML 1.0 cannot carry most control
characters (U+0000-U+0008, U+000B, U+000C, U+000E-U+001F), lone surrogates
(U+D800-U+DFFF, which Python strings can hold) or U+FFFE/U+FFFF: a body with one of
them is not well-formed, so S3 refuses the whole request (MalformedXML; moto answers
500) on every retry, every round, and the other 999 keys of the batch are never
deleted. A carriage return is well-formed but not carried either: botocore writes it
raw, and every XML parser turns it into a line feed, so S3 would delete ``a\\nb``
when asked for ``a\\rb`` (moto does the same). Tab and line feed are carried exactly.

Such keys exist: S3 takes them in a PUT (the key is in the URL) and lists them (botocore
asks for URL-encoded listings). The sweeper keeps them, never sends them, and reports
each one by name (`gcd.sweep.deleter`). Deleting one needs a client that writes character
references (``&#13;``), or a lifecycle rule.
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
