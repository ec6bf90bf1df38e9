"""Strict, bounded JSON for every document that crosses an edge (pure).

Design notes: docs/internals/kernel.md, `l0gc.strictjson`.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

from l0gc.errors import InvalidJson

try:
    import msgspec
except ImportError:  # pragma: no cover - a runtime dependency; see the module docstring
    _MSGSPEC: Any = None
    _ENCODER: Any = None
else:
    _MSGSPEC = msgspec.json.Decoder()
    _ENCODER = msgspec.json.Encoder()

__all__ = ["DEFAULT_MAX_DEPTH", "dumps", "loads"]

DEFAULT_MAX_DEPTH = 32
# Python's default int_max_str_digits, fixed here so the rule does not depend on the
# interpreter's settings (converting a longer literal takes time quadratic in its length).
_MAX_INT_DIGITS = 4300

# A complete string literal (escapes included), or one bracket, or a stray quote (the
# start of a string that never ends). Unrolled-loop form: linear, no backtracking blowup.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}"]', re.DOTALL)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
# A \uD800-\uDFFF escape: the only way a lone surrogate can get into a decoded string.
# A run of more than _MAX_INT_DIGITS digits, looked for in the document's UTF-8 bytes with
# every byte but an ASCII digit blanked (a regex with a lookbehind tried every character:
# ~3 us per object key of a request naming keys).
_DIGITS = bytes(0x31 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_RUN = b"1" * (_MAX_INT_DIGITS + 1)
# The integer -0 (not -0.5, -0e1): JSON allows it, but no epoch or offset is negative.
# A JSON number starts the text or follows one of `[ : ,` or whitespace, so a "-0" right
# after anything else (a name: "obj-0f3a") is inside a string and needs no check.
_NEGATIVE_ZERO = re.compile(r"-0+(?![0-9.eE])")  # and `_number_starts` before it
_NUMBER_STARTS = frozenset("[:, \t\n\r")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
# What json.JSONDecoder.decode skips around a document; "" is in _SPACE so that an empty
# text gets json's own "Expecting value" error.
_WHITESPACE = re.compile(r"[ \t\n\r]*", re.VERBOSE | re.MULTILINE | re.DOTALL).match  # json's
_SPACE = ("", " ", "\t", "\n", "\r")


def loads(
    raw: bytes | bytearray | memoryview | str,
    *,
    what: str,
    max_bytes: int,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> Any:
    """Decode one JSON document under the rules above; raise `InvalidJson` naming `what`."""
    size = len(raw)  # a character is at least one byte: no need to encode a huge string
    if size > max_bytes:
        raise InvalidJson(what, f"it is {size} bytes, more than the limit of {max_bytes}")
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
    if len(data) > max_bytes:
        raise InvalidJson(what, f"it is {len(data)} bytes, more than the limit of {max_bytes}")
    if isinstance(raw, str):
        text = raw
        if _has_surrogate(text):
            raise InvalidJson(what, "it holds a lone UTF-16 surrogate, which is not UTF-8 text")
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidJson(what, f"it is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if text.startswith("\ufeff"):
        raise InvalidJson(what, "it starts with a byte-order mark (write plain UTF-8)")
    # Checking every integer in Python costs more than the rest of the parse: only a
    # document with a long run of digits somewhere (maybe in a string) pays for it. In
    # UTF-8 no byte of a multi-byte character is an ASCII digit: the run is found in the
    # bytes, every other byte blanked (C speed).
    long_digits = len(data) > _MAX_INT_DIGITS and _LONG_RUN in data.translate(_DIGITS)
    value = _UNDECIDED if long_digits else _quick(text)
    if value is _UNDECIDED or (
        text.count("[") + text.count("{") > max_depth and _deeper_than(value, max_depth)
    ):
        # Before the standard parser, which recurses; after msgspec (which refuses deep
        # nesting itself, RecursionError) only to name where a deep value is too deep.
        _check_depth(text, what=what, max_depth=max_depth)
    try:
        if value is _UNDECIDED:
            value = _decode(_CAREFUL if long_digits else _FAST, text)
    except _Refused as exc:
        raise InvalidJson(what, exc.problem) from None
    except json.JSONDecodeError as exc:
        problem = exc.msg.removesuffix(" at")  # "Unterminated string starting at"
        raise InvalidJson(what, f"it is not JSON: {problem} at offset {exc.pos}") from None
    except (ValueError, RecursionError) as exc:  # belt and braces: the rules above stop both
        raise InvalidJson(what, f"it cannot be decoded: {_clip(str(exc))}") from None
    # Only a text with a -0 somewhere (e.g. in a name: "topic-00001") is stripped of its
    # strings to see whether one is a number (the text is valid JSON here, so a number's
    # next character is the same with or without the strings).
    if _negative_zero(text) and _negative_zero(_STRING.sub("", text)):
        raise InvalidJson(what, "it holds the integer -0, which names no count or epoch: write 0")
    if "\\u" in text and _SURROGATE_ESCAPE.search(text) and _holds_surrogate(value):
        raise InvalidJson(what, "a string holds a lone UTF-16 surrogate escape (\\uD800-\\uDFFF)")
    return value


def dumps(
    value: Any,
    *,
    what: str,
    nonfinite_as_null: bool = False,
    indent: int | None = None,
    sort_keys: bool = False,
    compact: bool = False,
) -> str:
    """Encode `value` as valid, ASCII-only JSON; raise `InvalidJson` on NaN/Infinity.

    With `nonfinite_as_null`, non-finite floats are written as ``null`` instead (for
    reports: a broken value must not make the whole output unparseable).
    """
    if nonfinite_as_null:
        value = _nonfinite_to_none(value)
    separators = (",", ":") if compact else None
    try:
        return json.dumps(
            value, allow_nan=False, indent=indent, sort_keys=sort_keys, separators=separators
        )
    except ValueError as exc:
        raise InvalidJson(what, f"it cannot be written as JSON: {_clip(str(exc))}") from None


class _Refused(Exception):
    """Raised inside the parser's hooks; `loads` turns it into `InvalidJson`."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def _deeper_than(value: Any, max_depth: int) -> bool:
    """True when containers nest more than `max_depth` deep in a decoded `value` (no
    recursion; the top-level container is depth 1, as `_check_depth` counts)."""
    if not isinstance(value, dict | list):
        return False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > max_depth:
                    return True
                stack.append((child, depth + 1))
    return False


def _negative_zero(text: str) -> bool:
    """True when `text` has a `-0` integer where a JSON number can start. The pattern is
    searched from its literal `-0` (a lookbehind in the pattern made every character a
    candidate: ~2 us per object key in a request naming keys), the start checked here."""
    return any(
        m.start() == 0 or text[m.start() - 1] in _NUMBER_STARTS
        for m in _NEGATIVE_ZERO.finditer(text)
    )


def _check_depth(text: str, *, what: str, max_depth: int) -> None:
    if text.count("[") + text.count("{") <= max_depth:
        return  # cannot be nested deeper than it has brackets (the usual case)
    # At C speed: drop the string literals, keep only the brackets, and take the
    # running maximum of the depth. Only a refusal pays for the offset search.
    outside_strings = _STRING.sub("", text)
    if '"' in outside_strings:
        offset = next(m.start() for m in _TOKEN.finditer(text) if m.group() == '"')
        raise InvalidJson(what, f"it is not JSON: unterminated string at offset {offset}")
    brackets = _NOT_BRACKET.sub("", outside_strings)
    if len(brackets) <= max_depth or max(accumulate(map(_STEP.__getitem__, brackets))) <= max_depth:
        return
    depth = 0
    for match in _TOKEN.finditer(text):
        depth += _STEP.get(match.group(), 0)
        if depth > max_depth:
            raise InvalidJson(
                what, f"it is nested more than {max_depth} levels deep (at offset {match.start()})"
            )


_UNDECIDED = object()


def _quick(text: str) -> Any:
    """msgspec's value of `text` when it is provably the standard parser's (the module
    docstring), else `_UNDECIDED`."""
    if _MSGSPEC is None or "\\u" in text:
        return _UNDECIDED
    try:
        value = _MSGSPEC.decode(text)
    except (msgspec.DecodeError, RecursionError, ValueError):
        return _UNDECIDED
    # No key given twice: see the module docstring.
    return value if _ENCODER.encode(value).count(b":") == text.count(":") else _UNDECIDED


def _decode(decoder: json.JSONDecoder, text: str) -> Any:
    """`decoder.decode(text)`, same errors, without its two layers of Python calls (a 1M
    record read decodes a million small documents)."""
    start = _skip_space(text, 0) if text[:1] in _SPACE else 0
    try:
        value, end = decoder.scan_once(text, start)  # type: ignore[attr-defined]
    except StopIteration as err:
        raise json.JSONDecodeError("Expecting value", text, err.value) from None
    if end != len(text):
        end = _skip_space(text, end)
        if end != len(text):
            raise json.JSONDecodeError("Extra data", text, end)
    return value


def _skip_space(text: str, at: int) -> int:
    match = _WHITESPACE(text, at)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"an object has the key {_clip(repr(key))} more than once")
            seen.add(key)
    return doc


def _finite_float(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise _Refused(f"the number {_clip(literal)} is too large for a float")
    return number


def _bounded_int(literal: str) -> int:
    if len(literal) > _MAX_INT_DIGITS:
        raise _Refused(f"an integer has {len(literal)} digits, more than {_MAX_INT_DIGITS}")
    return int(literal)


def _refuse_constant(name: str) -> None:
    raise _Refused(f"{name} is not a JSON number (NaN and Infinity are refused)")


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _holds_surrogate(value: Any) -> bool:
    """True if any key or string in the decoded `value` has a lone surrogate (no recursion)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _nonfinite_to_none(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _nonfinite_to_none(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_nonfinite_to_none(item) for item in value]
    return value


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_FAST = json.JSONDecoder(
    object_pairs_hook=_object_without_duplicates,
    parse_float=_finite_float,
    parse_constant=_refuse_constant,
)
_CAREFUL = json.JSONDecoder(
    object_pairs_hook=_object_without_duplicates,
    parse_float=_finite_float,
    parse_int=_bounded_int,
    parse_constant=_refuse_constant,
)
