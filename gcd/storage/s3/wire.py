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
    "error_document",
    "parse_s3_timestamp",
    "read_delete_result",
    "read_error",
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
    """The parsed root element, which must be `name`, and its namespace prefix."""
    root = _document(body, name)
    namespace, _, local = root.tag.rpartition("}")
    if local != name:
        raise ResponseParserError(f"expected a <{name}> answer, got <{root.tag}>: {body[:200]!r}")
    return root, f"{namespace}}}" if namespace else ""


def _document(body: bytes, name: str) -> Element:
    """The parsed root element of `name`'s answer.

    A DOCTYPE is refused in any encoding: a UTF-8 body (every store's) by a byte check
    and the C tree builder; any other (UTF-16, a declared single-byte encoding) by a
    parser whose target refuses it (`_NoDoctype`, ~20 % slower)."""
    try:
        if _plain_utf8(body):
            refuse_doctype(body, name)
            return fromstring(body)  # noqa: S314 - UTF-8 without a DOCTYPE: no entities
        parser = XMLParser(target=_NoDoctype())  # noqa: S314 - refuses any DOCTYPE
        parser.feed(body)
        return parser.close()
    # ValueError: an encoding expat cannot read; LookupError: one Python does not know
    except (ParseError, ValueError, LookupError) as exc:
        raise ResponseParserError(f"{name} answer is not XML ({exc}): {body[:200]!r}") from exc


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
    """A ListObjectsV2 answer (see the module docstring): scanned, or read as a tree when
    the scanner does not take it."""
    listing = _scan_listing(body)
    return listing if listing is not None else _tree_listing(body)


def read_delete_result(body: bytes) -> dict[str, Any]:
    """A DeleteObjects answer as ``{"Deleted": [...], "Errors": [...]}`` of dicts with
    botocore's member names (only those present in the answer): scanned, or read as a
    tree when the scanner does not take it."""
    answer = _scan_delete_result(body)
    return answer if answer is not None else _tree_delete_result(body)


def error_document(body: bytes) -> bool:
    """Whether `body`'s root element is ``<Error>`` (a look at its start only: the XML
    declaration, then the root tag)."""
    head = body[:512].lstrip()
    if head.startswith(b"<?xml"):
        end = head.find(b"?>")
        head = head[end + 2 :].lstrip() if end >= 0 else b""
    return head.startswith((b"<Error>", b"<Error "))


def read_error(body: bytes) -> tuple[str, str] | None:
    """The Code and Message of an S3 error answer (root ``<Error>``, or ``<Error>`` under
    another root, as botocore reads them), each "" when absent; None when the body is
    empty or not XML (botocore then names the error by its HTTP status)."""
    if not body.strip():
        return None
    try:
        root = _document(body, "S3 error")
    except ResponseParserError:
        return None
    namespace = root.tag[: root.tag.rfind("}") + 1]
    error = root if root.tag == f"{namespace}Error" else root.find(f"{namespace}Error")
    if error is None:
        return "", ""
    code, message = error.find(f"{namespace}Code"), error.find(f"{namespace}Message")
    return (
        (code.text or "") if code is not None else "",
        (message.text or "") if message is not None else "",
    )


# -- the tree readers: every answer the scanner does not take ----------------------------


def _tree_listing(body: bytes) -> Listing:
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
        try:  # (isdigit: no sign, no space; int: "²" is a digit but not a number)
            number = int(size) if size.isdigit() else -1
        except ValueError:  # also more digits than int() reads (4,300)
            number = -1
        if number < 0:
            raise ResponseParserError(f"Size {size!r} of {key!r} is not a number")
        append(ObjectInfo(key, number, _timestamp(entry.findtext(modified_tag), key)))
    truncated_text = root.findtext(ns + "IsTruncated")
    if truncated_text not in {"true", "false", None}:
        raise ResponseParserError(f"IsTruncated {truncated_text!r} is not true or false")
    truncated = truncated_text == "true"
    token = root.findtext(ns + "NextContinuationToken") or None
    if truncated and token is None:
        raise ResponseParserError("a truncated ListObjectsV2 page without NextContinuationToken")
    return Listing(tuple(objects), truncated, token)


def _tree_delete_result(body: bytes) -> dict[str, Any]:
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


# -- the scanner: plain UTF-8 answers of the shape stores send ----------------------------
#
# A handful of regular expressions over the decoded text, each a grammar of the shape it
# takes, so that a body it accepts is well-formed XML and reads exactly as the tree reader
# reads it; anything else (a DOCTYPE, a comment, CDATA, an attribute, a namespace prefix,
# another encoding, a carriage return, an entry it cannot read...) is None: the tree
# reader then reads it, or raises as it always has. Builds no tree: the page's strings
# and one list, nothing the cyclic collector tracks but the results.

_NAME = r"[A-Za-z_][A-Za-z0-9_.-]*+"
_WS = r"[ \t\n]*+"
# Character data: anything but "<". The characters XML does not allow, and a carriage
# return (which the parser would turn into a line feed), are refused in the whole body
# first (`_scannable`), as are references that are not XML's and "]]>".
_DATA = r"[^<]*+"
_NOT_XML = bytes(range(9)) + b"\x0b\x0c\r" + bytes(range(14, 32))  # and U+FFFE, U+FFFF
_S3_XMLNS = re.escape(_NS[1:-1])
_DECLARATION = (
    r"""(?:<\?xml version=(?:"1\.0"|'1\.0')"""
    r"""(?: encoding=(?:"[Uu][Tt][Ff]-8"|'[Uu][Tt][Ff]-8'))?"""
    r"""(?: standalone=(?:"(?:yes|no)"|'(?:yes|no)'))?\?>)?"""
)
# References: the five entities, and characters by a number of at most 16 digits (more
# leading zeros go to the tree reader).
_NOT_ENTITY = re.compile(r"&(?!(?:amp|lt|gt|quot|apos);)")
_BAD_REFERENCE = re.compile(r"&(?!(?:amp|lt|gt|quot|apos|#[0-9]{1,16}|#x[0-9a-fA-F]{1,16});)")
_CHARACTER_REFERENCE = re.compile(r"&#(?:([0-9]{1,16})|x([0-9a-fA-F]{1,16}));")
_REFERENCE = re.compile(r"&(?:(amp|lt|gt|quot|apos)|#([0-9]{1,16})|#x([0-9a-fA-F]{1,16}));")
_ENTITIES = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
_ENTRY = "\x00"  # stands in the envelope for each entry the scanner took out of it


def _element(group: str, depth: int, name: str = _NAME) -> str:
    """An element named `name` without attributes: empty, character data, or (`depth` > 0)
    elements of `depth` - 1 levels separated by white space; its end tag matches its start
    tag (`group`: a back reference)."""
    if depth == 0:
        content = _DATA
    else:
        child = _element(group + "_", depth - 1)
        content = f"(?:{_DATA}|{_WS}(?:{child}{_WS})++)"
    return f"<(?P<{group}>{name})(?:/>|>{content}</(?P={group})>)"


def _once(number: int, name: str, data: str = _DATA) -> str:
    """Element `name` of character data (`data`), captured as group `number`, at most
    once."""
    return f"<{name}>(?({number})(?!))({data})</{name}>"


def _all_of(numbers: range, then: str) -> str:
    """`then`, once every group of `numbers` took part (else no match)."""
    pattern = then
    for number in reversed(numbers):
        pattern = f"(?({number}){pattern}|(?!))"
    return pattern


def _envelope(root: str, fields: tuple[str, ...], entries: tuple[str, ...]) -> re.Pattern[str]:
    """The whole answer with each entry replaced by `_ENTRY`: the declaration, the root
    element (no namespace or S3's), each of `fields` at most once (groups 1...), and other
    elements, none named as an entry or a field."""
    taken = "|".join(fields + entries)
    other = _element("other", 2, f"(?!(?:{taken})[/>]){_NAME}")
    children = "|".join([_ENTRY] + [_once(n, f) for n, f in enumerate(fields, 1)] + [other])
    return re.compile(
        f'{_DECLARATION}{_WS}<{root}(?: xmlns="{_S3_XMLNS}")?'
        f"(?:/>|>{_WS}(?:(?:{children}){_WS})*+</{root}>){_WS}"
    )


_LISTING_FIELDS = ("IsTruncated", "NextContinuationToken", "EncodingType")
_LISTING = _envelope("ListBucketResult", _LISTING_FIELDS, ("Contents",))
# One <Contents> entry: Key (group 1, not empty), LastModified (2, ending "Z": S3's
# form) and Size (3, ASCII digits) exactly once each, other elements (ETag, Owner...) two
# levels deep at most.
_CONTENTS_OTHER = _element("c", 2, f"(?!(?:Key|LastModified|Size)[/>]){_NAME}")
_CONTENTS_FIELDS = (
    _once(1, "Key", "[^<]++"),
    _once(2, "LastModified", "[^<]++(?<=Z)"),
    _once(3, "Size", "[0-9]++"),
)
_CONTENTS = re.compile(
    f"<Contents>{_WS}(?:(?:{'|'.join(_CONTENTS_FIELDS)}|{_CONTENTS_OTHER}){_WS})*+"
    f"{_all_of(range(1, 4), '</Contents>')}"
)
_CONTENTS_STRIDE = _CONTENTS.groups + 1  # re.split: the text between, then every group
_DELETE = _envelope("DeleteResult", (), ("Deleted", "Error"))
# One <Deleted> or <Error> entry (group 1) of elements of character data (group 2).
_DELETE_CHILD = f"<(?P<d>{_NAME})(?:/>|>{_DATA}</(?P=d)>)"
_DELETE_ENTRY = re.compile(f"<(Deleted|Error)>((?:{_WS}{_DELETE_CHILD})*+{_WS})</\\1>")
_DELETE_STRIDE = _DELETE_ENTRY.groups + 1
_CHILD = re.compile(f"<({_NAME})(?:/>|>({_DATA})</\\1>)")


def _scannable(body: bytes) -> str | None:
    """`body` as text when it is UTF-8 of characters XML allows, without a carriage
    return, whose references are all XML's own (the five entities and characters XML
    allows) and that has no "]]>" in character data."""
    if len(body.translate(None, _NOT_XML)) != len(body):
        return None
    if not body.isascii() and (b"\xef\xbf\xbe" in body or b"\xef\xbf\xbf" in body):
        return None
    try:
        text = body.decode()
    except UnicodeDecodeError:  # (lone surrogates too)
        return None
    if "]" in text and "]]>" in text:
        return None
    if "&" in text and _NOT_ENTITY.search(text) is not None:  # a character reference?
        if _BAD_REFERENCE.search(text) is not None:
            return None
        for decimal, hexadecimal in _CHARACTER_REFERENCE.findall(text):
            if not _xml_character(int(decimal) if decimal else int(hexadecimal, 16)):
                return None
    return text


def _xml_character(code: int) -> bool:
    """Whether XML 1.0 allows the character `code` (its production Char)."""
    return (
        code in {0x9, 0xA, 0xD}
        or 0x20 <= code <= 0xD7FF
        or 0xE000 <= code <= 0xFFFD
        or 0x10000 <= code <= 0x10FFFF
    )


def _reference(match: re.Match[str]) -> str:
    entity, decimal, hexadecimal = match.groups()
    if entity:
        return _ENTITIES[entity]
    return chr(int(decimal) if decimal else int(hexadecimal, 16))


def _unescape(text: str) -> str:
    """Character data with its references (already checked) replaced, in one pass."""
    return _REFERENCE.sub(_reference, text) if "&" in text else text


def _scan_listing(body: bytes) -> Listing | None:
    """The listing, or None when the scanner does not take `body` (`_tree_listing` then)."""
    text = _scannable(body)
    if text is None:
        return None
    pieces = _CONTENTS.split(text)
    stride = _CONTENTS_STRIDE
    envelope = _ENTRY.join(pieces[::stride])
    head = _LISTING.fullmatch(envelope)
    if head is None or envelope.count(_ENTRY) * stride + 1 != len(pieces):
        return None  # not the shape (the count: no NUL of the body's own stood in)
    truncated_text, token_text, encoding = head.group(1, 2, 3)
    if truncated_text is not None:
        truncated_text = _unescape(truncated_text)
        if truncated_text not in {"true", "false"}:
            return None
    truncated = truncated_text == "true"
    token = _unescape(token_text) if token_text else None
    if truncated and token is None:
        return None
    url = encoding is not None and _unescape(encoding) == "url"
    keys = pieces[1::stride]
    every = "".join(keys)
    if "&" in every or (url and ("%" in every or "+" in every)):
        keys = [_unescape(key) for key in keys]
        if url:
            keys = [unquote_plus(key) if "%" in key or "+" in key else key for key in keys]
    fromisoformat = datetime.fromisoformat
    try:  # a LastModified in S3's form: `parse_s3_timestamp`'s first branch
        objects = [
            ObjectInfo(key, int(size), fromisoformat(modified).timestamp())
            for key, modified, size in zip(keys, pieces[2::stride], pieces[3::stride], strict=True)
        ]
    except (ValueError, OverflowError):
        return None  # not a time: the tree reader reads it as botocore does, or raises
    return Listing(tuple(objects), truncated, token)


def _scan_delete_result(body: bytes) -> dict[str, Any] | None:
    """The answer, or None when the scanner does not take `body` (`_tree_delete_result`)."""
    text = _scannable(body)
    if text is None:
        return None
    pieces = _DELETE_ENTRY.split(text)
    stride = _DELETE_STRIDE
    envelope = _ENTRY.join(pieces[::stride])
    if _DELETE.fullmatch(envelope) is None or envelope.count(_ENTRY) * stride + 1 != len(pieces):
        return None
    answer: dict[str, Any] = {"Deleted": [], "Errors": []}
    deleted, errors = answer["Deleted"], answer["Errors"]
    for kind, children in zip(pieces[1::stride], pieces[2::stride], strict=True):
        if "&" in children:
            item = {name: _unescape(data) for name, data in _CHILD.findall(children)}
        else:
            item = dict(_CHILD.findall(children))
        if not item.get("Key"):
            return None
        (deleted if kind == "Deleted" else errors).append(item)
    return answer


def _text(value: str) -> str:
    if _ESCAPE.search(value) is None:
        return value
    return _ESCAPE.sub(lambda match: _ESCAPES[match.group()], value)


def delete_body(targets: Iterable[str], *, quiet: bool = False) -> bytes:
    """The DeleteObjects body for targets (`gcd.rules.versions`) XML can carry
    (`gcd.rules.xmlkeys`), with ``<Quiet>true</Quiet>`` when `quiet`. ``&``, ``<``, ``>``
    and a carriage return are written as references (a bare carriage return would reach
    the server as a line feed). A batch of plain keys (no version, nothing to escape:
    the common one) is joined at once; otherwise each target is split here inline."""
    head = f'<?xml version="1.0" encoding="UTF-8"?><Delete xmlns="{_NS[1:-1]}">'
    tail = "<Quiet>true</Quiet></Delete>" if quiet else "<Quiet>false</Quiet></Delete>"
    targets = list(targets)
    every = "\n".join(targets)
    if targets and SEPARATOR not in every and _ESCAPE.search(every) is None:
        objects = "</Key></Object><Object><Key>".join(targets)  # plain keys: one join
        return f"{head}<Object><Key>{objects}</Key></Object>{tail}".encode()
    parts = [head]
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
    append(tail)
    return "".join(parts).encode()
