"""The direct XML of ListObjectsV2 and DeleteObjects reads what botocore reads.

Every answer is generated (keys with XML-special, unicode, '+' and '%' characters;
children in any order, unknown and nested elements, pretty-printed or not, with or
without the S3 namespace) and read twice: by `gcd.storage.s3.wire` and by botocore's own
parser with the S3 model (plus its URL-decoding handler). Both must agree exactly. A
malformed answer must raise, never read as an empty or a last page.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote_plus
from xml.etree.ElementTree import Element, fromstring

import botocore.session
import pytest
from botocore import handlers
from botocore.parsers import ResponseParserError, RestXMLParser
from botocore.serialize import create_serializer
from hypothesis import given, settings
from hypothesis import strategies as st

from gcd.rules.versions import version_target
from gcd.rules.xmlkeys import xml_unsafe_reason
from gcd.storage.objectstore import DeleteResult
from gcd.storage.s3.wire import delete_body, parse_s3_timestamp, read_delete_result, read_listing

_S3 = botocore.session.get_session().get_service_model("s3")
_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'

# Keys S3 can hold and XML can carry: letters, digits, XML-special characters, unicode
# (including astral), '+', '%', spaces, tab and line feed.
_CHARS = st.sampled_from(list("abz09/._-+%&<>\"' \t\n~!@#$^*()=[]{}|;:,?éß日本🎉\u00a0"))
KEYS = st.text(_CHARS, min_size=1, max_size=40).filter(lambda k: xml_unsafe_reason(k) is None)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _element(name: str, text: str, pretty: bool) -> str:
    return f"{'  ' if pretty else ''}<{name}>{_escape(text)}</{name}>{chr(10) if pretty else ''}"


@st.composite
def listings(draw: st.DrawFn) -> tuple[bytes, list[str]]:
    """A ListObjectsV2 answer as a store might write it, and the keys it lists."""
    keys = draw(st.lists(KEYS, max_size=8))
    pretty, url = draw(st.booleans()), draw(st.booleans())
    namespace = draw(st.booleans())
    parts = []
    for index, key in enumerate(keys):
        children = [
            ("Key", quote_plus(key, safe="/") if url else key),
            ("LastModified", f"2026-11-{1 + index % 28:02d}T03:12:{index % 60:02d}.000Z"),
            ("Size", str(draw(st.integers(0, 10**12)))),
            ("ETag", '"d41d8cd98f00b204e9800998ecf8427e"'),
            ("StorageClass", "STANDARD"),
        ]
        order = draw(st.permutations(children))
        owner = "<Owner><ID>x</ID><DisplayName>&amp;y</DisplayName></Owner>" if index % 2 else ""
        body = "".join(_element(n, v, pretty) for n, v in order) + owner
        parts.append(f"<Contents>{body}</Contents>")
    truncated = draw(st.booleans())
    header = [
        ("Name", "b"),
        ("Prefix", "p/"),
        ("MaxKeys", "1000"),
        ("KeyCount", str(len(keys))),
        ("IsTruncated", "true" if truncated else "false"),
    ]
    if truncated:
        header.append(("NextContinuationToken", draw(st.text("ab+/=&<", min_size=1))))
    if url:
        header.append(("EncodingType", "url"))
    head = "".join(_element(n, v, pretty) for n, v in draw(st.permutations(header)))
    xmlns = f' xmlns="{_NS}"' if namespace else ""
    text = f"<ListBucketResult{xmlns}>{head}{''.join(parts)}</ListBucketResult>"
    return (_DECLARATION + text).encode(), keys


def _botocore(operation: str, body: bytes) -> dict[str, Any]:
    """What botocore makes of a 200 answer of `operation` (keys URL-decoded as the client
    does when it asked for EncodingType=url)."""
    shape = _S3.operation_model(operation).output_shape
    parser = RestXMLParser(timestamp_parser=parse_s3_timestamp)
    parsed: dict[str, Any] = parser.parse({"body": body, "headers": {}, "status_code": 200}, shape)
    if operation == "ListObjectsV2":
        handlers.decode_list_object_v2(parsed, {"encoding_type_auto_set": True})
    return parsed


@settings(max_examples=300, deadline=None)
@given(listings())
def test_a_listing_reads_as_botocore_reads_it(listing: tuple[bytes, list[str]]) -> None:
    body, keys = listing
    ours = read_listing(body)
    theirs = _botocore("ListObjectsV2", body)
    contents = theirs.get("Contents", [])
    assert [o.key for o in ours.objects] == [c["Key"] for c in contents] == keys
    assert [o.size for o in ours.objects] == [c["Size"] for c in contents]
    assert [o.last_modified_s for o in ours.objects] == [
        c["LastModified"].timestamp() for c in contents
    ]
    assert ours.truncated is theirs["IsTruncated"]
    assert ours.next_token == theirs.get("NextContinuationToken")


@st.composite
def delete_answers(draw: st.DrawFn) -> tuple[bytes, list[str]]:
    """A DeleteObjects answer (Deleted and Errors, versions and markers) and what was sent."""
    entries, sent = [], []
    for key in draw(st.lists(KEYS, max_size=6)):
        version = draw(st.none() | st.text("abc123", min_size=1, max_size=6))
        sent.append(version_target(key, version))
        kind = draw(st.sampled_from(["Deleted", "Deleted-marker", "Error", "Error-keyonly"]))
        children = [("Key", key)]
        if version is not None and kind != "Error-keyonly":
            children.append(("VersionId", version))
        if kind == "Deleted-marker":
            children += [("DeleteMarker", "true"), ("DeleteMarkerVersionId", "m1")]
        if kind.startswith("Error"):
            children += [
                ("Code", draw(st.sampled_from(["AccessDenied", "SlowDown", ""]))),
                ("Message", draw(st.text("a <&>", max_size=10))),
            ]
        tag = "Error" if kind.startswith("Error") else "Deleted"
        entries.append(f"<{tag}>{''.join(_element(n, v, False) for n, v in children)}</{tag}>")
    body = f'<DeleteResult xmlns="{_NS}">{"".join(entries)}</DeleteResult>'
    return (_DECLARATION + body).encode(), sent


@settings(max_examples=300, deadline=None)
@given(delete_answers())
def test_a_delete_answer_reads_as_botocore_reads_it(answer: tuple[bytes, list[str]]) -> None:
    body, sent = answer
    assert DeleteResult.from_answer(read_delete_result(body), sent) == DeleteResult.from_answer(
        _botocore("DeleteObjects", body), sent
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(KEYS | st.just("a\rb"), st.none() | st.text("abc", min_size=1)),
        min_size=1,
        max_size=10,
    )
)
def test_a_delete_body_names_exactly_the_targets(named: list[tuple[str, str | None]]) -> None:
    """Parsed by an XML parser (as the server parses it), the body names every target,
    a carriage return included (botocore's body would name a line feed there), and is
    botocore's body apart from that."""
    targets = [version_target(key, version) for key, version in named]
    root = fromstring(delete_body(targets))
    ns = f"{{{_NS}}}"
    assert root.tag == f"{ns}Delete"
    assert root.findtext(f"{ns}Quiet") == "false"
    assert _named(root) == named
    objects = [{"Key": k} if v is None else {"Key": k, "VersionId": v} for k, v in named]
    request = create_serializer("rest-xml").serialize_to_request(
        {"Bucket": "b", "Delete": {"Objects": objects, "Quiet": False}},
        _S3.operation_model("DeleteObjects"),
    )
    assert _named(fromstring(request["body"])) == [(k.replace("\r", "\n"), v) for k, v in named]


def _named(root: Element) -> list[tuple[str | None, str | None]]:
    ns = f"{{{_NS}}}"
    objects = root.iter(f"{ns}Object")
    return [(o.findtext(f"{ns}Key"), o.findtext(f"{ns}VersionId")) for o in objects]


_LISTING = (
    f'<ListBucketResult xmlns="{_NS}"><IsTruncated>false</IsTruncated>{{}}</ListBucketResult>'
)
_MODIFIED = "<LastModified>2026-11-22T03:12:50.000Z</LastModified>"
_ENTRY = f"<Contents><Key>k</Key>{_MODIFIED}<Size>1</Size></Contents>"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"", "not XML"),
        (_LISTING.format(_ENTRY)[:-20].encode(), "not XML"),  # cut short
        (b"<Error><Code>InternalError</Code></Error>", "expected a <ListBucketResult>"),
        (b"<DeleteResult/>", "expected a <ListBucketResult>"),
        (_LISTING.format("<Contents><Size>1</Size></Contents>").encode(), "without a <Key>"),
        (_LISTING.format(_ENTRY.replace("<Size>1</Size>", "<Size>-1</Size>")).encode(), "Size"),
        (
            _LISTING.format(_ENTRY.replace("2026-11-22T03:12:50.000Z", "yesterday")).encode(),
            "LastModified",
        ),
        (_LISTING.format(_ENTRY.replace(_MODIFIED, "")).encode(), "LastModified"),
        (_LISTING.replace("false", "true").format(_ENTRY).encode(), "without NextContinuation"),
        (_LISTING.replace("false", "yes").format(_ENTRY).encode(), "IsTruncated"),
        (
            (
                b'<!DOCTYPE x [<!ENTITY a "aaaa">]><ListBucketResult><Contents><Key>&a;</Key>'
                b"</Contents></ListBucketResult>"
            ),
            "DOCTYPE",
        ),
    ],
)
def test_a_malformed_listing_raises(body: bytes, why: str) -> None:
    with pytest.raises(ResponseParserError, match=why):
        read_listing(body)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"<DeleteResult><Deleted><Key>a</Key></Deleted>", "not XML"),
        (b"<ListBucketResult/>", "expected a <DeleteResult>"),
        (b"<DeleteResult><Deleted><VersionId>v</VersionId></Deleted></DeleteResult>", "<Key>"),
        (b"<DeleteResult><Error><Code>AccessDenied</Code></Error></DeleteResult>", "<Key>"),
    ],
)
def test_a_malformed_delete_answer_raises(body: bytes, why: str) -> None:
    with pytest.raises(ResponseParserError, match=why):
        read_delete_result(body)


@pytest.mark.parametrize(
    "modified",
    [
        "2026-11-22T03:12:50.000Z",
        "2026-11-22T03:12:50Z",
        "2026-11-22T03:12:50+00:00",
        "2026-11-22T04:12:50+01:00",
        "Sun, 22 Nov 2026 03:12:50 GMT",
        "1795317170",
    ],
)
def test_a_last_modified_in_any_form_botocore_reads_is_read_as_it_reads_it(modified: str) -> None:
    """S3's own form directly; other forms as botocore parses them."""
    body = _LISTING.format(_ENTRY.replace("2026-11-22T03:12:50.000Z", modified)).encode()
    (ours,) = read_listing(body).objects
    (theirs,) = _botocore("ListObjectsV2", body)["Contents"]
    assert ours.last_modified_s == theirs["LastModified"].timestamp() == 1795317170.0


def test_a_last_modified_without_a_zone_is_utc_whatever_the_machine_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """botocore would read it in the machine's zone; S3 times are UTC."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        body = _LISTING.format(_ENTRY.replace("03:12:50.000Z", "03:12:50.000")).encode()
        assert read_listing(body).objects[0].last_modified_s == 1795317170.0
    finally:
        monkeypatch.undo()
        time.tzset()


def test_an_empty_listing_is_read_as_empty_and_last() -> None:
    listing = read_listing(_LISTING.format("").encode())
    assert listing.objects == ()
    assert not listing.truncated
    assert listing.next_token is None


_BOMB = (
    '<?xml version="1.0" encoding="{encoding}"?><!DOCTYPE x [<!ENTITY a "{a}">'
    '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
    "<{root}><Contents><Key>&b;</Key><Size>1</Size>"
    "<LastModified>2026-11-22T03:12:50.000Z</LastModified></Contents></{root}>"
)


@pytest.mark.parametrize(
    ("encoding", "codec"),
    [
        ("UTF-8", "utf-8"),
        ("UTF-16", "utf-16"),
        ("UTF-16", "utf-16-le"),
        ("UTF-16", "utf-16-be"),
        ("ISO-8859-1", "latin-1"),
        ("US-ASCII", "ascii"),
    ],
)
@pytest.mark.parametrize("root", ["ListBucketResult", "DeleteResult"])
def test_a_doctype_is_refused_in_any_encoding(encoding: str, codec: str, root: str) -> None:
    """Issue 35, item 9: `<!DOCTYPE` in UTF-16 is not the bytes `<!DOCTYPE`; the parser
    itself refuses it, before its entities expand (here to a 1,000,000-character key)."""
    text = _BOMB.format(encoding=encoding, a="a" * 100_000, root=root)
    body = text.encode(codec)
    assert codec.startswith("utf-16") is (b"<!DOCTYPE" not in body)  # the old check's gap
    read = read_listing if root == "ListBucketResult" else read_delete_result
    with pytest.raises(ResponseParserError, match="DOCTYPE"):
        read(body)


@pytest.mark.parametrize("encoding", ["UTF-16", "ISO-8859-1"])
def test_a_listing_in_another_encoding_without_a_doctype_is_read(encoding: str) -> None:
    text = f'<?xml version="1.0" encoding="{encoding}"?>' + _LISTING.format("é" + _ENTRY)
    plain = _LISTING.format("é" + _ENTRY).encode()
    assert read_listing(text.encode(encoding)) == read_listing(plain)


def test_an_encoding_expat_cannot_read_is_a_parse_error_not_a_crash() -> None:
    body = '<?xml version="1.0" encoding="utf-16-le"?><ListBucketResult/>'.encode("utf-16-le")
    with pytest.raises(ResponseParserError, match="not XML"):
        read_listing(body)
