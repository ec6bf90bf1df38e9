"""The XML of S3's two hot operations, read and written directly.

Design notes: docs/internals/storage.md, `gcd.storage.s3.wire`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote_plus
from xml.etree.ElementTree import Element, ParseError, TreeBuilder, XMLParser, fromstring

from botocore.parsers import ResponseParserError
from botocore.utils import parse_timestamp

from gcd.rules.versions import SEPARATOR
from gcd.storage.objectstore import ObjectInfo

__all__ = [
    "Listing",
    "delete_body",
    "parse_s3_timestamp",
    "read_delete_result",
    "read_listing",
    "refuse_doctype",
]

_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_DELETE_ENTRIES = {"Deleted": "Deleted", "Error": "Errors"}  # element -> botocore's member
_ESCAPE = re.compile(r"[&<>\r]")
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"}


@dataclass(frozen=True, slots=True)
class Listing:
    """One ListObjectsV2 page as the sweeper reads it."""

    objects: tuple[ObjectInfo, ...]
    truncated: bool
    next_token: str | None


class _NoDoctype(TreeBuilder):
    """A tree builder that refuses a DOCTYPE as soon as expat meets one, in whatever
    encoding the document is, before any entity is declared or expanded (defusedxml's
    rule). The C parser calls a target's `doctype` itself."""

    def doctype(self, name: str, pubid: str | None, system: str | None) -> None:
        raise ResponseParserError(f"the answer has a DOCTYPE ({name!r}): refused")


_DECLARED = re.compile(rb"<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._-]+)[\"']")


def _plain_utf8(body: bytes) -> bool:
    """True when expat reads `body` as UTF-8 (no byte order mark, no declared encoding but
    UTF-8): its ASCII characters are then its bytes, so `<!DOCTYPE` is found byte-wise."""
    if not body.startswith(b"<") or body[1:2] == b"\x00":  # UTF-16LE without a BOM
        return False
    declared = _DECLARED.match(body, 0, 200)
    return declared is None or declared.group(1).lower() in {b"utf-8", b"utf8"}


def refuse_doctype(body: bytes, name: str) -> None:
    """Raise `ResponseParserError` for a UTF-8 answer (as botocore and the Azure SDK
    decode every answer) that holds a DOCTYPE: S3 never sends one, and internal entities
    would expand (a 1,000,000-character key from a few hundred bytes)."""
    if b"<!DOCTYPE" in body:
        raise ResponseParserError(f"{name} answer has a DOCTYPE: {body[:200]!r}")


def _root(body: bytes, name: str) -> tuple[Element, str]:
    """The parsed root element, which must be `name`, and its namespace prefix.

    A DOCTYPE is refused in any encoding: a UTF-8 body (every store's) by a byte check
    and the C tree builder; any other (UTF-16, a declared single-byte encoding) by a
    parser whose target refuses it (`_NoDoctype`, ~20 % slower)."""
    try:
        if _plain_utf8(body):
            refuse_doctype(body, name)
            root = fromstring(body)  # noqa: S314 - UTF-8 without a DOCTYPE: no entities
        else:
            parser = XMLParser(target=_NoDoctype())  # noqa: S314 - refuses any DOCTYPE
            parser.feed(body)
            root = parser.close()
    except (ParseError, ValueError) as exc:  # ValueError: an encoding expat cannot read
        raise ResponseParserError(f"{name} answer is not XML ({exc}): {body[:200]!r}") from exc
    namespace, _, local = root.tag.rpartition("}")
    if local != name:
        raise ResponseParserError(f"expected a <{name}> answer, got <{root.tag}>: {body[:200]!r}")
    return root, f"{namespace}}}" if namespace else ""


def parse_s3_timestamp(value: Any) -> datetime:
    """botocore's timestamp parser with a fast path for S3's ISO 8601 UTC form.

    ListObjectsV2 sends every LastModified as `2026-11-22T03:12:50.000Z`; botocore parses
    each one with dateutil (~120 us: a third of the client's CPU for a 20k-key round).
    `datetime.fromisoformat` reads that form (Python >= 3.11) in ~1 us, aware in UTC.
    Anything else (RFC 822 headers, epoch numbers, a form fromisoformat rejects) goes
    to botocore's own parser, so the result is the same as botocore's.
    """
    if isinstance(value, str) and value.endswith("Z"):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    parsed: datetime = parse_timestamp(value)
    return parsed


def _timestamp(text: str | None, key: str) -> float:
    """LastModified as epoch seconds (`parse_s3_timestamp`); a time without a zone is UTC
    (botocore would read it in the machine's zone)."""
    try:
        parsed = parse_s3_timestamp(text)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ResponseParserError(f"LastModified {text!r} of {key!r} is not a time") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def read_listing(body: bytes) -> Listing:
    """A ListObjectsV2 answer (see the module docstring)."""
    root, ns = _root(body, "ListBucketResult")
    key_tag, size_tag, modified_tag = ns + "Key", ns + "Size", ns + "LastModified"
    url = root.findtext(ns + "EncodingType") == "url"
    objects: list[ObjectInfo] = []
    append = objects.append
    for entry in root.iterfind(ns + "Contents"):
        key = entry.findtext(key_tag)
        if not key:
            raise ResponseParserError(f"a <Contents> entry without a <Key>: {body[:200]!r}")
        if url and ("%" in key or "+" in key):
            key = unquote_plus(key)
        size = entry.findtext(size_tag) or "0"
        if not size.isdigit():
            raise ResponseParserError(f"Size {size!r} of {key!r} is not a number")
        append(ObjectInfo(key, int(size), _timestamp(entry.findtext(modified_tag), key)))
    truncated_text = root.findtext(ns + "IsTruncated")
    if truncated_text not in {"true", "false", None}:
        raise ResponseParserError(f"IsTruncated {truncated_text!r} is not true or false")
    truncated = truncated_text == "true"
    token = root.findtext(ns + "NextContinuationToken") or None
    if truncated and token is None:
        raise ResponseParserError("a truncated ListObjectsV2 page without NextContinuationToken")
    return Listing(tuple(objects), truncated, token)


def read_delete_result(body: bytes) -> dict[str, Any]:
    """A DeleteObjects answer as ``{"Deleted": [...], "Errors": [...]}`` of dicts with
    botocore's member names (only those present in the answer)."""
    root, ns = _root(body, "DeleteResult")
    strip = len(ns)
    answer: dict[str, Any] = {"Deleted": [], "Errors": []}
    for entry in root:
        kind = _DELETE_ENTRIES.get(entry.tag[strip:])
        if kind is None:
            continue
        item = {child.tag[strip:]: child.text or "" for child in entry}
        if not item.get("Key"):
            name = entry.tag[strip:]
            raise ResponseParserError(f"a <{name}> entry without a <Key>: {body[:200]!r}")
        answer[kind].append(item)
    return answer


def _text(value: str) -> str:
    if _ESCAPE.search(value) is None:
        return value
    return _ESCAPE.sub(lambda match: _ESCAPES[match.group()], value)


def delete_body(targets: Iterable[str], *, quiet: bool = False) -> bytes:
    """The DeleteObjects body for targets (`gcd.rules.versions`) XML can carry
    (`gcd.rules.xmlkeys`), with ``<Quiet>true</Quiet>`` when `quiet`. ``&``, ``<``, ``>``
    and a carriage return are written as references (a bare carriage return would reach
    the server as a line feed). A target is split here inline, not by a call per key."""
    parts = [f'<?xml version="1.0" encoding="UTF-8"?><Delete xmlns="{_NS[1:-1]}">']
    append = parts.append
    for target in targets:
        key, versioned, version_id = target.partition(SEPARATOR)
        if not versioned:
            append(f"<Object><Key>{_text(key)}</Key></Object>")
        else:
            append(
                f"<Object><Key>{_text(key)}</Key><VersionId>{_text(version_id)}"
                "</VersionId></Object>"
            )
    append("<Quiet>true</Quiet></Delete>" if quiet else "<Quiet>false</Quiet></Delete>")
    return "".join(parts).encode()
