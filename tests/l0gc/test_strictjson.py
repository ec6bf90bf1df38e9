"""strictjson: bounded, strict JSON that refuses with InvalidJson and nothing else."""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l0gc import strictjson
from l0gc.errors import InvalidJson, InvalidRecord, L0gcError
from l0gc.strictjson import dumps, loads

LIMIT = 1 << 20


def refusal(raw: bytes | str, **limits: int) -> str:
    """The message `loads` refuses `raw` with (fails the test if it accepts it)."""
    with pytest.raises(InvalidJson) as caught:
        loads(raw, what="the test document", **{"max_bytes": LIMIT, **limits})
    message = str(caught.value)
    assert message.startswith("the test document: ")
    return message


def test_a_plain_document_decodes_like_json_loads() -> None:
    """A valid document comes back exactly as json.loads would decode it."""
    raw = '{"a": [1, -2.5, "x\\u00e9", null, true, {"b": {}}], "c": "\\ud83d\\ude00"}'
    assert loads(raw.encode(), what="doc", max_bytes=LIMIT) == json.loads(raw)
    assert loads(raw, what="doc", max_bytes=LIMIT) == json.loads(raw)


def test_the_size_cap_is_checked_before_parsing() -> None:
    """A document over max_bytes is refused by size, even when it is not JSON at all."""
    assert "5 bytes, more than the limit of 4" in refusal(b"\xff\xff[[[", max_bytes=4)
    assert "6 bytes" in refusal("\u00e9\u00e9\u00e9", max_bytes=5)  # UTF-8 bytes, not chars
    assert loads(b"[1]", what="doc", max_bytes=3) == [1]


def parser_never_called(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any call of the standard JSON parser, which recurses, fail the test. msgspec's
    may see a deep text first: it refuses deep nesting itself (RecursionError, caught),
    and the depth of a value it decodes is checked before the value is returned."""

    def trap(*_args: object) -> Any:
        raise AssertionError("the parser saw a text the depth scan should have refused")

    monkeypatch.setattr(strictjson, "_decode", trap)


def cpu_s(work: Callable[[], object]) -> float:
    """The least CPU time (this thread's, so other processes' load does not count) that
    `work` took over three runs."""
    best = math.inf
    for _ in range(3):
        started = time.thread_time()
        work()
        best = min(best, time.thread_time() - started)
    return best


def one_scan_s(raw: bytes) -> float:
    """CPU time of one pass of a tokenizing regex over `raw`: what a linear scan costs here."""
    text = raw.decode()
    return cpu_s(lambda: re.findall(r'"[^"\\]*"|[\[\]{}]', text))


def test_100k_open_brackets_are_refused_fast_without_recursion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """100 000 nested arrays are refused as too deep before any parser sees them (so no
    RecursionError), in linear time: about one regex pass over the text. The bound is
    relative to such a pass measured here, in CPU time, so neither a slow nor a loaded
    machine moves it; a scan quadratic in the depth costs thousands of passes."""
    raw = b"[" * 100_000 + b"]" * 100_000
    parser_never_called(monkeypatch)
    message = refusal(raw, max_bytes=1 << 21)
    assert "nested more than 32 levels deep (at offset 32)" in message
    assert cpu_s(lambda: refusal(raw, max_bytes=1 << 21)) < 20 * one_scan_s(raw)


def test_depth_counts_arrays_and_objects_but_not_brackets_inside_strings() -> None:
    """max_depth levels are accepted, one more is refused; brackets in strings do not count."""
    deep = '{"a":' * 3 + "[[1]]" + "}" * 3
    assert loads(deep, what="doc", max_bytes=LIMIT, max_depth=5) == {"a": {"a": {"a": [[1]]}}}
    assert "nested more than 4 levels" in refusal(deep, max_depth=4)
    brackets_in_strings = json.dumps(["[[[[{{{{", '\\"[[[[', {"k[[[[": "]]]]"}])
    assert loads(brackets_in_strings, what="doc", max_bytes=LIMIT, max_depth=2)[0] == "[[[[{{{{"


def test_depth_is_nesting_not_the_number_of_brackets() -> None:
    """Many closed arrays and objects side by side are one level each: a list of 100
    objects or of 100 arrays is 2 levels deep, under a limit of 2."""
    objects = "[" + ",".join(['{"a":1}'] * 100) + "]"
    assert loads(objects, what="doc", max_bytes=LIMIT, max_depth=2) == [{"a": 1}] * 100
    arrays = "{" + ",".join(f'"k{i}":[]' for i in range(100)) + "}"
    assert len(loads(arrays, what="doc", max_bytes=LIMIT, max_depth=2)) == 100
    assert "nested more than 1 levels deep (at offset 1)" in refusal(objects, max_depth=1)
    # a closed sibling takes back exactly its own level: the next one is as deep as ever
    assert "nested more than 2 levels deep (at offset 5)" in refusal("[[],[[1]]]", max_depth=2)
    assert "nested more than 2 levels deep (at offset 9)" in refusal('[{},{"a":{}}]', max_depth=2)


def test_an_unterminated_string_is_refused_before_the_parser_sees_the_brackets() -> None:
    """An open string followed by brackets is refused as unterminated, with its offset."""
    assert "unterminated string at offset 1" in refusal('["' + "[" * 50_000)
    assert "nterminated string starting at offset 0" in refusal('"ends in a backslash\\')


def test_duplicate_keys_are_refused_by_name() -> None:
    """An object naming a key twice is refused, even when both values are equal."""
    assert "the key 'version' more than once" in refusal(b'{"version": 1, "version": 1}')
    assert "the key 'b' more than once" in refusal(b'[{"a": {"b": 1, "b": 2}}]')


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused(constant: str) -> None:
    """NaN, Infinity and -Infinity are not JSON numbers and are refused."""
    assert f"{constant} is not a JSON number" in refusal(f'{{"at": {constant}}}')


@pytest.mark.parametrize("literal", ["1e400", "-1e400", "1" * 400 + ".0"])
def test_floats_that_overflow_to_infinity_are_refused(literal: str) -> None:
    """A number too large for a float is refused rather than becoming inf."""
    assert "too large for a float" in refusal(f"[{literal}]")
    assert loads("[1e300]", what="doc", max_bytes=LIMIT) == [1e300]


def test_an_integer_beyond_4300_digits_is_refused() -> None:
    """A 5000-digit integer is refused by length (the conversion would be quadratic)."""
    assert "5000 digits, more than 4300" in refusal("9" * 5000)
    assert loads("9" * 4300, what="doc", max_bytes=LIMIT) == int("9" * 4300)
    assert loads(f'["{"9" * 5000}"]', what="doc", max_bytes=LIMIT) == ["9" * 5000]  # a string
    # The run is looked for in the UTF-8 bytes: other characters, also other digits and
    # multi-byte ones between ASCII digits, end it.
    assert "5000 digits" in refusal('["\u00e9\u0663", ' + "9" * 5000 + "]")
    arabic = "\u0663" * 5000
    assert loads(f'["{arabic}"]', what="doc", max_bytes=LIMIT) == [arabic]
    split = "9" * 4300 + "\u00e9" + "9" * 4300
    assert loads(f'["{split}"]', what="doc", max_bytes=LIMIT) == [split]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"\xff{}", "not UTF-8 (invalid start byte at byte 0)"),
        ('"\u00e9"'.encode("utf-16"), "not UTF-8"),
        (b"\xef\xbb\xbf{}", "byte-order mark"),
        (b'["\\ud800"]', "lone UTF-16 surrogate escape"),
        (b'{"\\udfff": 1}', "lone UTF-16 surrogate escape"),
        ('["\ud800"]', "lone UTF-16 surrogate"),
    ],
)
def test_only_utf8_text_is_accepted(raw: bytes | str, expected: str) -> None:
    """Non-UTF-8 bytes, a byte-order mark and lone surrogates are refused."""
    assert expected in refusal(raw)


def test_a_surrogate_pair_escape_is_accepted() -> None:
    """A valid surrogate pair escape decodes to its character (only lone halves are refused)."""
    assert loads(b'"\\ud83d\\ude00"', what="doc", max_bytes=LIMIT) == "\U0001f600"


def test_the_integer_minus_zero_is_refused_but_not_a_float_or_a_string_that_holds_it() -> None:
    """-0 names no count, epoch or offset: refused wherever it is a number; -0.5, -0e1 and
    a name like "topic-0" are fine."""
    assert "it holds the integer -0, which names no count or epoch" in refusal('{"epoch": -0}')
    assert "it holds the integer -0" in refusal('["topic-0", -0]')
    doc = loads('{"topic-0": ["topic-0", -0.5, -0e1, 0]}', what="doc", max_bytes=LIMIT)
    assert doc == {"topic-0": ["topic-0", -0.5, -0.0, 0]}


@pytest.mark.parametrize("raw", [b"", b" ", b"[1,]", b"{'a': 1}", b"[1] [2]", b'"\x01"'])
def test_syntax_errors_are_refused_with_their_offset(raw: bytes) -> None:
    """Empty input, trailing commas, single quotes, extra data, raw control chars: refused."""
    assert "it is not JSON: " in refusal(raw)
    assert " at offset " in refusal(raw)


def test_invalid_json_is_an_invalid_record_and_a_value_error() -> None:
    """InvalidJson is caught by `except InvalidRecord`, `except ValueError` and L0gcError."""
    error = InvalidJson("doc", "problem")
    assert isinstance(error, InvalidRecord)
    assert isinstance(error, ValueError)
    assert isinstance(error, L0gcError)
    assert (error.what, error.problem) == ("doc", "problem")


def test_dumps_refuses_nonfinite_floats_or_writes_them_as_null() -> None:
    """dumps never writes NaN/Infinity: it refuses them, or writes null when asked to."""
    value = {"at": math.nan, "window": [math.inf, -math.inf, 1.5], "owner": "a\x1b"}
    with pytest.raises(InvalidJson, match="report: it cannot be written as JSON"):
        dumps(value, what="report")
    text = dumps(value, what="report", nonfinite_as_null=True, sort_keys=True)
    assert json.loads(text, parse_constant=pytest.fail) == {
        "at": None,
        "window": [None, None, 1.5],
        "owner": "a\x1b",
    }
    assert text.isascii()
    assert dumps([1, {"a": None}], what="doc", compact=True) == '[1,{"a":null}]'
    # by default: keys in the order given, json's usual spacing
    assert dumps({"b": 1, "a": [1, 2]}, what="doc") == '{"b": 1, "a": [1, 2]}'


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_decode_or_raise_invalid_json(raw: bytes) -> None:
    """Any bytes either decode or raise InvalidJson; no other exception escapes."""
    with contextlib.suppress(InvalidJson):
        loads(raw, what="fuzz", max_bytes=200, max_depth=4)


JSON_ALPHABET = st.sampled_from(
    [*'[]{}",:\\ -+.0123456789eEtruefalsnNIaiy', "\\u", "\\ud800", "\x00", "\u00e9"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(JSON_ALPHABET, max_size=80).map("".join))
def test_json_like_text_decodes_or_raises_invalid_json(raw: str) -> None:
    """Text made of JSON's own tokens either decodes or raises InvalidJson, nothing else."""
    try:
        value = loads(raw, what="fuzz", max_bytes=200, max_depth=3)
    except InvalidJson:
        return
    assert json.loads(dumps(value, what="fuzz")) == value  # what it accepts can be written


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(JSON_VALUES)
def test_any_finite_document_round_trips(value: Any) -> None:
    """Whatever dumps writes, loads reads back equal, and refuses it only if too deep."""
    text = dumps(value, what="doc")
    if nesting(value) <= 6:
        assert loads(text.encode(), what="doc", max_bytes=LIMIT, max_depth=6) == value
    else:
        with pytest.raises(InvalidJson, match="nested more than 6 levels"):
            loads(text.encode(), what="doc", max_bytes=LIMIT, max_depth=6)


def nesting(value: Any) -> int:
    """How many arrays/objects deep `value` is (a scalar is 0)."""
    if isinstance(value, list):
        return 1 + max(map(nesting, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(nesting, value.values()), default=0)
    return 0


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "\t\n",
        " {} ",
        "{}",
        "{} x",
        "[1] ,",
        "x",
        " 1",
        "1 ",
        '"a"  ',
        "\r[]\r",
        "[1]\u00a0",
        "\u00a0[1]",
        '{"a": 1}\n\n',
    ],
)
def test_a_document_and_the_space_around_it_are_judged_as_json_judges_them(text: str) -> None:
    """loads calls json's scanner itself (no JSONDecoder.decode): leading and trailing
    whitespace, an empty text and extra data give json's own answer and offset."""
    try:
        expected: tuple[str, Any] = ("value", json.loads(text))
    except json.JSONDecodeError as exc:
        expected = ("refused", f"it is not JSON: {exc.msg} at offset {exc.pos}")
    try:
        got: tuple[str, Any] = ("value", loads(text, what="t", max_bytes=LIMIT))
    except InvalidJson as exc:
        got = ("refused", exc.problem)
    assert got == expected


# -- msgspec's parser first, the standard one deciding (the module docstring) -----------


def judged(raw: str) -> tuple[str, str]:
    """What `loads` makes of `raw`: ("value", repr) or ("refused", the problem)."""
    try:
        return ("value", repr(loads(raw, what="doc", max_bytes=LIMIT, max_depth=8)))
    except InvalidJson as exc:
        return ("refused", exc.problem)


def judged_by_the_standard_parser(raw: str) -> tuple[str, str]:
    """`judged` without msgspec (as where it is not installed)."""
    quick = strictjson._MSGSPEC
    strictjson._MSGSPEC = None
    try:
        return judged(raw)
    finally:
        strictjson._MSGSPEC = quick


def test_a_record_is_decoded_by_the_quick_parser() -> None:
    """A partition record as l0gc writes it is decoded by msgspec (not handed on)."""
    text = (
        '{"created_epoch":7,"owner":"pub-1","partition":"t/3","tracker":{"floor":7,'
        '"pending_slides":[{"offset":2,"previous_applied":8}]},"updated_at":1.5,'
        '"version":1,"watermark":6,"window":[8,9]}'
    )
    value = strictjson._quick(text)
    assert value == json.loads(text)
    assert strictjson._quick('{"owner":"host:9000","a":[{"b":":"}]}') == {
        "owner": "host:9000",
        "a": [{"b": ":"}],
    }


@pytest.mark.parametrize(
    "raw",
    [
        '{"a":1,"a":2}',  # msgspec keeps the last: handed on, refused
        '{"a":{"b":1,"b":1}}',
        '[{"x":":","x":":"}]',
        '{"a":1,"a":2,"b":"\\u003a"}',  # an escaped ":" would make up for the dropped one
        '{"a":"x:y","a":"x:y"}',
        '{"a":[{"c":1}],"a":2}',  # the dropped value holds a member of its own
    ],
)
def test_duplicate_keys_are_refused_whatever_the_quick_parser_keeps(raw: str) -> None:
    assert strictjson._quick(raw) is strictjson._UNDECIDED
    assert "more than once" in refusal(raw)


COLON_ALPHABET = st.sampled_from(
    [
        '{"a":',
        '{"b":',
        '"a":',
        '"b":',
        '":"',
        '"x:y"',
        "1",
        ",",
        "}",
        "]",
        "[",
        '"\\u003a"',
        "NaN",
        "1e400",
        "-0",
        " ",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(COLON_ALPHABET | JSON_ALPHABET, max_size=40).map("".join))
def test_the_quick_parser_never_changes_a_verdict(raw: str) -> None:
    """Any text (objects, duplicate keys, colons in strings and escapes weighted): the
    same value, of the same types, or the same refusal as the standard parser alone."""
    assert judged(raw) == judged_by_the_standard_parser(raw)


@settings(max_examples=200, deadline=None)
@given(JSON_VALUES, st.data())
def test_a_member_given_twice_is_refused_wherever_it_is(value: Any, data: st.DataObject) -> None:
    """A document with one object's member written twice (same or another value): the
    same verdict as the standard parser, which refuses it."""
    text = dumps(value, what="doc", compact=True)
    starts = [i for i, char in enumerate(text) if char == "{" and text[i + 1] != "}"]
    if not starts:
        return
    at = data.draw(st.sampled_from(starts)) + 1
    member = data.draw(st.sampled_from(['"k":1,', '"k":":",', '"k":{"k":[1]},']))
    twice = text[:at] + member + member + text[at:]
    assert judged(twice) == judged_by_the_standard_parser(twice)
    assert judged(twice)[0] == "refused"


@settings(max_examples=300, deadline=None)
@given(
    st.from_regex(r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,30})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)
)
def test_every_number_is_read_as_the_standard_parser_reads_it(literal: str) -> None:
    """Integers of any length under the limit and decimals of up to 30 digits, with
    exponents: the same int or the same (correctly rounded) float, or the same refusal."""
    text = f'{{"n":[{literal}]}}'
    assert judged(text) == judged_by_the_standard_parser(text)
