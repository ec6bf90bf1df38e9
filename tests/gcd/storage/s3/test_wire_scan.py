"""The scanner of `gcd.storage.s3.wire` reads what its tree reader reads, and botocore.

ListObjectsV2 and DeleteObjects answers are first scanned (no tree); a body the scanner
does not take goes to the tree reader. Two properties hold that together:

- on generated answers of the shapes stores send, with hostile keys (every character
  written raw, as one of XML's five entities or as a decimal or hexadecimal character
  reference; "]]>", "<", keys that look like tags, unicode, white space, a carriage
  return by reference), the scanner takes the body and its result is the tree reader's
  and botocore's;
- on any body (those answers broken by a comment, CDATA, a DOCTYPE, an attribute, an
  unknown entity, a control character, a duplicated or missing element, a cut...), the
  scanner either declines or gives exactly what the tree reader gives, and the public
  reader behaves as the tree reader (the same result, or the same error).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote_plus

import botocore.session
import pytest
from botocore import handlers
from botocore.parsers import ResponseParserError, RestXMLParser
from hypothesis import given, settings
from hypothesis import strategies as st

from gcd.rules.versions import version_target
from gcd.storage.objectstore import DeleteResult
from gcd.storage.s3 import wire
from gcd.storage.s3.wire import parse_s3_timestamp, read_delete_result, read_listing

_S3 = botocore.session.get_session().get_service_model("s3")
_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;"}

# Characters a key may hold (a carriage return only by reference), and pieces of text
# that look like markup.
_CHARS = list("az09/._-+%&<>\"' \t\n;#[]=éß日本🎉\u00a0\u2028\x7f\x85\ufffd\r")
_PIECES = ["]]>", "<Key>", "</Key>", "</Contents>", "<!--", "<![CDATA[", "&amp;", "&#13;", "%2B"]
KEYS = st.lists(st.sampled_from(_CHARS) | st.sampled_from(_PIECES), min_size=1, max_size=12).map(
    "".join
)
SPACE = st.sampled_from(["", "", "\n", "\n  ", " ", "\t", "\n\t\t"])


@st.composite
def written(draw: st.DrawFn, text: str) -> str:
    """`text` as XML character data, each character written raw where XML allows it, or
    by an entity, or by a decimal or hexadecimal character reference (one draw)."""
    choices = draw(st.lists(st.integers(0, 255), min_size=len(text), max_size=len(text)))
    out: list[str] = []
    for char, choice in zip(text, choices, strict=True):
        ways = ["decimal", "hex"]
        if char in _ENTITIES:
            ways.append("entity")
        if char not in "<&\r" and not (char == ">" and "".join(out).endswith("]]")):
            ways += ["raw"] * 6
        way, zeros = ways[choice % len(ways)], "0" * (choice % 3)
        if way == "raw":
            out.append(char)
        elif way == "entity":
            out.append(_ENTITIES[char])
        elif way == "decimal":
            out.append(f"&#{zeros}{ord(char)};")
        else:
            out.append(f"&#x{zeros}{ord(char):{'x' if choice % 2 else 'X'}};")
    return "".join(out)


def _join(draw: st.DrawFn, elements: list[str]) -> str:
    return "".join(draw(SPACE) + element for element in elements) + draw(SPACE)


_DECLARATIONS = [
    "",
    '<?xml version="1.0" encoding="UTF-8"?>',
    '<?xml version="1.0" encoding="UTF-8"?>\n',
    "<?xml version='1.0' encoding='utf-8'?>\n",
    '<?xml version="1.0"?>',
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n',
]


@st.composite
def listings(draw: st.DrawFn) -> tuple[bytes, list[str]]:
    """A ListObjectsV2 answer of a shape stores send, with hostile keys, and its keys."""
    keys = draw(st.lists(KEYS, max_size=6))
    url = draw(st.booleans())
    entries = []
    for key in keys:
        listed = quote_plus(key, safe="/") if url else key
        modified = draw(
            st.sampled_from(["2026-11-22T03:12:50.000Z", "2026-11-22T03:12:50Z"])
            | st.integers(0, 59).map(lambda s: f"2027-01-31T23:59:{s:02d}.123456Z")
        )
        children = [
            f"<Key>{draw(written(listed))}</Key>",
            f"<LastModified>{modified}</LastModified>",
            f"<Size>{draw(st.integers(0, 10**15))}</Size>",
            f"<ETag>{draw(written(chr(34) + 'd41d8cd98f00b204e9800998ecf8427e' + chr(34)))}</ETag>",
            "<StorageClass>STANDARD</StorageClass>",
        ]
        children += draw(
            st.lists(
                st.sampled_from(
                    [
                        "<ChecksumAlgorithm>CRC64NVME</ChecksumAlgorithm>",
                        "<ChecksumType/>",
                        (
                            f"<Owner>{draw(SPACE)}<ID>x</ID>{draw(SPACE)}"
                            f"<DisplayName>&amp;y</DisplayName>{draw(SPACE)}</Owner>"
                        ),
                        (
                            "<RestoreStatus><IsRestoreInProgress>false</IsRestoreInProgress>"
                            "<Key>not this one</Key></RestoreStatus>"
                        ),
                        "<Contents1>&lt;Key&gt;</Contents1>",
                    ]
                ),
                max_size=3,
                unique=True,
            )
        )
        entries.append(f"<Contents>{_join(draw, draw(st.permutations(children)))}</Contents>")
    truncated = draw(st.booleans())
    header = [
        "<Name>b</Name>",
        f"<Prefix>{draw(written('p/<&]]>'))}</Prefix>",
        "<MaxKeys>1000</MaxKeys>",
        f"<KeyCount>{len(keys)}</KeyCount>",
        f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>",
        "<StartAfter/>",
    ]
    if truncated or draw(st.booleans()):
        token = draw(st.text(st.sampled_from(list("ab+/=&<>]")), min_size=1, max_size=8))
        header.append(f"<NextContinuationToken>{draw(written(token))}</NextContinuationToken>")
    if url:
        header.append(f"<EncodingType>{draw(written('url'))}</EncodingType>")
    if draw(st.booleans()):
        header.append("<CommonPrefixes><Prefix>p/q/</Prefix></CommonPrefixes>")
    children = draw(st.permutations(header))
    split = draw(st.integers(0, len(children)))
    body = _join(draw, [*children[:split], *entries, *children[split:]])
    xmlns = f' xmlns="{_NS}"' if draw(st.booleans()) else ""
    text = f"<ListBucketResult{xmlns}>{body}</ListBucketResult>"
    return (draw(st.sampled_from(_DECLARATIONS)) + text).encode(), keys


def _botocore(operation: str, body: bytes) -> dict[str, Any]:
    shape = _S3.operation_model(operation).output_shape
    parser = RestXMLParser(timestamp_parser=parse_s3_timestamp)
    parsed: dict[str, Any] = parser.parse({"body": body, "headers": {}, "status_code": 200}, shape)
    if operation == "ListObjectsV2":
        handlers.decode_list_object_v2(parsed, {"encoding_type_auto_set": True})
    return parsed


@settings(max_examples=200, deadline=None)
@given(listings())
def test_the_scanner_takes_every_listing_and_reads_it_as_the_tree_and_botocore_do(
    listing: tuple[bytes, list[str]],
) -> None:
    body, keys = listing
    scanned = wire._scan_listing(body)
    assert scanned is not None, body
    assert scanned == wire._tree_listing(body) == read_listing(body)
    theirs = _botocore("ListObjectsV2", body)
    contents = theirs.get("Contents", [])
    assert [o.key for o in scanned.objects] == [c["Key"] for c in contents] == keys
    assert [o.size for o in scanned.objects] == [c["Size"] for c in contents]
    assert [o.last_modified_s for o in scanned.objects] == [
        c["LastModified"].timestamp() for c in contents
    ]
    assert scanned.truncated is theirs["IsTruncated"]
    assert scanned.next_token == theirs.get("NextContinuationToken")


@st.composite
def delete_answers(draw: st.DrawFn) -> tuple[bytes, list[str]]:
    """A DeleteObjects answer with hostile keys, versions and messages, and what was sent."""
    entries, sent = [], []
    for key in draw(st.lists(KEYS, max_size=6)):
        version = draw(st.none() | st.text(st.sampled_from(list("ab1&<")), min_size=1))
        sent.append(version_target(key, version))
        kind = draw(st.sampled_from(["Deleted", "Deleted-marker", "Error", "Error-keyonly"]))
        children = [f"<Key>{draw(written(key))}</Key>"]
        if version is not None and kind != "Error-keyonly":
            children.append(f"<VersionId>{draw(written(version))}</VersionId>")
        if kind == "Deleted-marker":
            children += [
                "<DeleteMarker>true</DeleteMarker>",
                "<DeleteMarkerVersionId>m1</DeleteMarkerVersionId>",
            ]
        if kind.startswith("Error"):
            code = draw(st.sampled_from(["AccessDenied", "SlowDown", ""]))
            message = draw(st.text(st.sampled_from(list("a <&>]")), max_size=8))
            children += [
                f"<Code>{code}</Code>" if code else "<Code/>",
                f"<Message>{draw(written(message))}</Message>",
            ]
        tag = "Error" if kind.startswith("Error") else "Deleted"
        entries.append(f"<{tag}>{_join(draw, draw(st.permutations(children)))}</{tag}>")
    xmlns = f' xmlns="{_NS}"' if draw(st.booleans()) else ""
    if entries or draw(st.booleans()):
        text = f"<DeleteResult{xmlns}>{_join(draw, entries)}</DeleteResult>"
    else:
        text = f"<DeleteResult{xmlns}/>"  # a quiet answer without failures
    return (draw(st.sampled_from(_DECLARATIONS)) + text).encode(), sent


@settings(max_examples=200, deadline=None)
@given(delete_answers())
def test_the_scanner_takes_every_delete_answer_and_reads_it_as_the_tree_and_botocore_do(
    answer: tuple[bytes, list[str]],
) -> None:
    body, sent = answer
    scanned = wire._scan_delete_result(body)
    assert scanned is not None, body
    assert scanned == wire._tree_delete_result(body) == read_delete_result(body)
    assert DeleteResult.from_answer(scanned, sent) == DeleteResult.from_answer(
        _botocore("DeleteObjects", body), sent
    )


# -- any body: the scanner declines, or reads what the tree reads --------------------------

_BREAKS = [
    "<!-- c -->", "<![CDATA[x]]>", "<?pi x?>", '<!DOCTYPE x [<!ENTITY a "b">]>', "&a;",
    "\r", "\r\n", "\x01", "\x00", "\ufeff", "\ufffe", "&#0;", "&#x41;", "&#X41;", "&#;",
    "&#00000000000000000065;", "]]>", "<", ">", "&", ' a="b"', ' xmlns="urn:x"', ":",
    "<Key>z</Key>", "<Key/>", "<Key></Key>", "</Contents>", "<Contents>", "<Contents/>",
    "<Size>1</Size>", "<Size>-1</Size>", "<Size/>", "<LastModified>x</LastModified>",
    "<LastModified>2026-11-22T03:12:50+00:00</LastModified>", "<IsTruncated>true</IsTruncated>",
    "<NextContinuationToken/>", "<EncodingType>url</EncodingType>", "<X>", "</X>", "<X/>",
    "<Deleted><Key>k</Key></Deleted>", "<Error><Code>c</Code></Error>", "<Deleted/>", "x",
    " ", "<VersionId><X/></VersionId>", "\x00<Key>k</Key>", "é",
]  # fmt: skip


@st.composite
def broken(draw: st.DrawFn, bodies: st.SearchStrategy[tuple[bytes, list[str]]]) -> bytes:
    """A generated answer, then cut, spliced or with a piece of (mostly) markup put in."""
    text = draw(bodies)[0].decode()
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        end = draw(st.integers(at, min(len(text), at + 40)))
        change = draw(st.sampled_from(["insert", "insert", "insert", "cut", "double", "end"]))
        if change == "insert":
            text = text[:at] + draw(st.sampled_from(_BREAKS)) + text[at:]
        elif change == "cut":
            text = text[:at] + text[end:]
        elif change == "double":
            text = text[:end] + text[at:]
        else:
            text = text[:at]
    return text.encode()


def _outcome(read: Callable[[bytes], Any], body: bytes) -> tuple[str, Any]:
    try:
        return "read", read(body)
    except Exception as exc:  # the outcome compared is the exception itself
        return type(exc).__name__, str(exc)


@settings(max_examples=600, deadline=None)
@given(broken(listings()))
def test_a_listing_the_scanner_takes_is_read_as_the_tree_reads_it(body: bytes) -> None:
    tree = _outcome(wire._tree_listing, body)
    scanned = wire._scan_listing(body)
    if scanned is not None:
        assert tree == ("read", scanned), body
    assert _outcome(read_listing, body) == tree


@settings(max_examples=600, deadline=None)
@given(broken(delete_answers()))
def test_a_delete_answer_the_scanner_takes_is_read_as_the_tree_reads_it(body: bytes) -> None:
    tree = _outcome(wire._tree_delete_result, body)
    scanned = wire._scan_delete_result(body)
    if scanned is not None:
        assert tree == ("read", scanned), body
    assert _outcome(read_delete_result, body) == tree


# -- which shapes the scanner leaves to the tree reader -----------------------------------

_HEAD = f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="{_NS}">'
_ENTRY = (
    "<Contents><Key>k</Key><LastModified>2026-11-22T03:12:50.000Z</LastModified>"
    "<Size>1</Size></Contents>"
)
_PAGE = _HEAD + "<IsTruncated>false</IsTruncated>" + _ENTRY + "</ListBucketResult>"


@pytest.mark.parametrize(
    "body",
    [
        b"\xef\xbb\xbf" + _PAGE.encode(),  # a byte order mark
        _PAGE.replace("UTF-8", "ISO-8859-1").encode("latin-1"),
        _PAGE.replace("UTF-8", "UTF-16").encode("utf-16"),
        _PAGE.replace("<Key>k", "<Key>k\r\n").encode(),  # the parser makes it a line feed
        _PAGE.replace("<Key>k", "<Key><![CDATA[k]]>").encode(),
        _PAGE.replace("<Key>k", "<Key><!-- c -->k").encode(),
        _PAGE.replace("<Size>", "<?pi x?><Size>").encode(),
        _PAGE.replace("<Size>", '<Size unit="B">').encode(),
        _PAGE.replace(f'xmlns="{_NS}"', f'xmlns:s3="{_NS}"').replace("<", "<s3:").replace(
            "<s3:/", "</s3:").replace("<s3:?", "<?").encode(),
        _PAGE.replace(_NS, "urn:other").encode(),
        _PAGE.replace("<Size>1</Size>", "").encode(),  # read as size 0 by the tree
        _PAGE.replace("<Size>1</Size>", "<Size>1</Size><Size>2</Size>").encode(),
        _PAGE.replace(".000Z", "+00:00").encode(),  # botocore's forms of a time
        _PAGE.replace("<Key>k", "<Key>&#00000000000000000107;").encode(),
        _PAGE.replace("<Key>k</Key>", "<Key>k<X/></Key>").encode(),
        _PAGE.replace(_ENTRY, "<CommonPrefixes><A><B><C/></B></A></CommonPrefixes>").encode(),
        _PAGE.replace(_ENTRY, "text between" + _ENTRY).encode(),
    ],
    ids=[
        "bom", "latin-1", "utf-16", "carriage-return", "cdata", "comment", "pi", "attribute",
        "prefix", "other-namespace", "no-size", "two-sizes", "other-time-form",
        "long-reference", "mixed-key", "deep", "text-between",
    ],
)  # fmt: skip
def test_other_shapes_are_left_to_the_tree_reader(body: bytes) -> None:
    assert wire._scan_listing(body) is None
    assert _outcome(read_listing, body) == _outcome(wire._tree_listing, body)


def test_the_scanner_takes_an_aws_answer() -> None:
    """An answer as AWS writes it (docs example, with EncodingType=url as the client asks)."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<ListBucketResult xmlns="{_NS}"><Name>bucket</Name><Prefix>p/</Prefix>'
        "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
        "<KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><EncodingType>url</EncodingType>"
        "<IsTruncated>true</IsTruncated><Contents><Key>p/a%2Bb+c</Key>"
        "<LastModified>2026-11-22T03:12:50.000Z</LastModified>"
        "<ETag>&quot;599bab3ed2c697f1d26842727561fd94&quot;</ETag>"
        "<ChecksumAlgorithm>CRC64NVME</ChecksumAlgorithm><ChecksumType>FULL_OBJECT</ChecksumType>"
        "<Size>857</Size><StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>"
    ).encode()
    scanned = wire._scan_listing(body)
    assert scanned == wire._tree_listing(body)
    assert scanned is not None
    assert [(o.key, o.size) for o in scanned.objects] == [("p/a+b c", 857)]
    assert scanned.next_token == "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="


@pytest.mark.parametrize("read", [read_listing, read_delete_result])
def test_an_encoding_python_does_not_know_is_a_parse_error_not_a_crash(
    read: Callable[[bytes], Any],
) -> None:
    """Found by the property above: the tree reader let codecs' LookupError out (the
    client translates only parse errors into a retryable StorageError)."""
    body = b'<?xml version="1.0" encoding="UTF-x8"?><ListBucketResult/>'
    with pytest.raises(ResponseParserError, match="not XML"):
        read(body)


@pytest.mark.parametrize("size", ["\u00b2", "1" * 5000])
def test_a_size_int_cannot_read_is_a_parse_error_not_a_crash(size: str) -> None:
    """A superscript digit passes str.isdigit, and int() reads at most 4,300 digits: the
    tree reader let their ValueError out."""
    body = _PAGE.replace("<Size>1</Size>", f"<Size>{size}</Size>").encode()
    assert wire._scan_listing(body) is None
    with pytest.raises(ResponseParserError, match="Size"):
        read_listing(body)
