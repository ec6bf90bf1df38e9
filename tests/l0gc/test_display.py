"""l0gc.display.printable: text from etcd is safe to write to a terminal."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from l0gc.display import printable


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("orders/0", "orders/0"),
        ("pub-\u00e9 1", "pub-\u00e9 1"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("a\nb\rc\td", "a\\nb\\rc\\td"),
        ("\u202eevil", "\\u202eevil"),
        ("\ud800", "\\ud800"),
        ("\U000e0001", "\\U000e0001"),
        ("\x00\x7f", "\\x00\\x7f"),
    ],
)
def test_non_printable_characters_become_backslash_escapes(text: str, shown: str) -> None:
    """Escapes, newlines, bidi overrides and surrogates are escaped; letters are kept."""
    assert printable(text) == shown


@given(st.text(alphabet=st.characters(exclude_categories=())))
def test_any_text_comes_out_printable_and_utf8(text: str) -> None:
    """Whatever the input, the output is printable and encodes as UTF-8."""
    shown = printable(text)
    assert shown.isprintable()
    shown.encode("utf-8")
    if text.isprintable():
        assert shown == text
