"""Key layouts: strict parsing, format/parse inverses, custom layouts, prefix sharding."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gcd.rules.layout import (
    DEFAULT_ROOT,
    EPOCH_MAX,
    KeyLayout,
    ParsedKey,
    compress_range,
    listing_prefixes,
    shard_range,
)
from l0gc.errors import ConfigError

# Keep hypothesis' example database out of the working tree.
no_db = settings(database=None)

DEFAULT = KeyLayout.default()
GOOD = "level_zero/data/417/000000000000012345/0b8e-uuid"
EPOCH18 = "000000000000012345"

# A custom layout with no prefix, an unpadded epoch and a permissive epoch group, so the
# checks made after the regex matched are exercised, not just the regex.
LOOSE = KeyLayout.custom(
    root="l0",
    pattern=r"e=(?P<epoch>[^/]+)/(?P<name>[^/]+)",
    template="e={epoch}/{name}",
)
# A custom padded layout with a prefix.
PADDED = KeyLayout.custom(
    root="bucket/l0",
    pattern=r"(?P<prefix>[0-9]{3})/v1-(?P<epoch>[0-9]+)/(?P<name>[^/]+)",
    epoch_width=12,
    template="{prefix:03d}/v1-{epoch:012d}/{name}",
)


def test_default_layout_parses_the_documented_example() -> None:
    """The key from docs/key-layout.md parses into its prefix, epoch and name."""
    assert DEFAULT.parse(GOOD) == ParsedKey(prefix=417, epoch=12345, name="0b8e-uuid")


def test_default_layout_properties() -> None:
    """The default layout is padded, has a prefix, and lists under root/."""
    assert KeyLayout() == DEFAULT == KeyLayout.from_spec("default")
    assert DEFAULT.root == DEFAULT_ROOT
    assert DEFAULT.padded
    assert DEFAULT.has_prefix
    assert DEFAULT.listing_root == "level_zero/data/"
    assert DEFAULT.prefix_dir(5) == "level_zero/data/005/"
    assert DEFAULT.max_epoch == 10**18 - 1
    assert KeyLayout.default("a/b").prefix_dir(999) == "a/b/999/"


@pytest.mark.parametrize(
    ("case", "key"),
    [
        ("empty key", ""),
        ("wrong root", "level_zero/dat/417/000000000000012345/x"),
        ("wrong root", "other/417/000000000000012345/x"),
        ("wrong root", "Level_zero/data/417/000000000000012345/x"),
        ("wrong root", "level_zero/data417/000000000000012345/x"),
        ("wrong root", "/level_zero/data/417/000000000000012345/x"),
        ("wrong root", "level_zero/data"),
        ("wrong root", "level_zero/data/"),
        ("no root", "417/000000000000012345/x"),
        ("wrong width", "level_zero/data/41/000000000000012345/x"),
        ("wrong width", "level_zero/data/4170/000000000000012345/x"),
        ("wrong width", "level_zero/data/417/00000000000012345/x"),
        ("wrong width", "level_zero/data/417/0000000000000012345/x"),
        ("wrong width", "level_zero/data/417/12345/x"),
        ("non-ascii digit", "level_zero/data/\u0664\u0661\u0667/000000000000012345/x"),
        ("non-ascii digit", "level_zero/data/417/00000000000001234\u0665/x"),
        ("non-ascii digit", "level_zero/data/\uff14\uff11\uff17/000000000000012345/x"),
        ("non-ascii digit", "level_zero/data/417/00000000000001234\uff15/x"),
        ("non-ascii digit", "level_zero/data/41\u00b2/000000000000012345/x"),
        ("non-ascii digit", "level_zero/data/417/00000000000001234\u096b/x"),
        ("not a digit", "level_zero/data/417/00000000000001234a/x"),
        ("not a digit", "level_zero/data/417/000000000_00012345/x"),
        ("sign", "level_zero/data/-17/000000000000012345/x"),
        ("sign", "level_zero/data/+17/000000000000012345/x"),
        ("sign", "level_zero/data/417/-00000000000012345/x"),
        ("sign", "level_zero/data/417/+00000000000012345/x"),
        ("extra segment", "level_zero/data/417/000000000000012345/a/b"),
        ("extra segment", "level_zero/data/417/extra/000000000000012345/x"),
        ("extra segment", "level_zero/data/v1/417/000000000000012345/x"),
        ("missing segment", "level_zero/data/417/000000000000012345"),
        ("missing segment", "level_zero/data/000000000000012345/x"),
        ("empty name", "level_zero/data/417/000000000000012345/"),
        ("dot name", "level_zero/data/417/000000000000012345/."),
        ("dot name", "level_zero/data/417/000000000000012345/.."),
        ("whitespace", " level_zero/data/417/000000000000012345/x"),
        ("whitespace", "level_zero/data/417/000000000000012345/x "),
        ("whitespace", "level_zero/data/417/000000000000012345/ x"),
        ("whitespace", "level_zero/data/417/000000000000012345/x\n"),
        ("whitespace", "level_zero/data/417/000000000000012345/\tx"),
        ("whitespace", "level_zero/data/417/000000000000012345/\u00a0x"),
        ("whitespace", "level_zero/data/ 17/000000000000012345/x"),
        ("whitespace", "level_zero/data/417/ 00000000000012345/x"),
        ("empty segment", "level_zero/data//417/000000000000012345/x"),
        ("empty segment", "level_zero//data/417/000000000000012345/x"),
        ("empty segment", "level_zero/data/417//000000000000012345/x"),
        ("empty segment", "level_zero/data/417/000000000000012345//x"),
    ],
)
def test_default_layout_rejects_keys_it_could_not_have_written(case: str, key: str) -> None:
    """Every key the default layout could not have produced parses to None."""
    assert DEFAULT.parse(key) is None, case


@pytest.mark.parametrize(
    ("case", "key"),
    [
        ("leading zero", "l0/e=05/x"),
        ("leading zeros", "l0/e=00/x"),
        ("non-ascii digit", "l0/e=\u0661\u0662\u0663/x"),
        ("fullwidth digit", "l0/e=\uff11\uff12/x"),
        ("sign", "l0/e=-5/x"),
        ("sign", "l0/e=+5/x"),
        ("whitespace", "l0/e= 5/x"),
        ("whitespace", "l0/e=5 /x"),
        ("underscore", "l0/e=1_000/x"),
        ("empty epoch", "l0/e=/x"),
        ("overflow", f"l0/e={EPOCH_MAX + 1}/x"),
        ("overflow", f"l0/e={10**30}/x"),
        ("huge", f"l0/e={'9' * 5000}/x"),
        ("wrong root", "l1/e=5/x"),
    ],
)
def test_custom_layout_checks_what_the_regex_let_through(case: str, key: str) -> None:
    """A permissive epoch group still only yields canonical ASCII int64 epochs."""
    assert LOOSE.parse(key) is None, case


def test_unpadded_layout_accepts_zero_and_int64_max() -> None:
    """Epoch 0 and the largest int64 parse; format writes them back."""
    for epoch in (0, 7, EPOCH_MAX):
        key = f"l0/e={epoch}/x"
        assert LOOSE.parse(key) == ParsedKey(prefix=None, epoch=epoch, name="x")
        assert LOOSE.format(None, epoch, "x") == key
    assert not LOOSE.padded
    assert not LOOSE.has_prefix
    assert LOOSE.max_epoch == EPOCH_MAX


def test_custom_pattern_is_ascii_even_with_backslash_d() -> None:
    """A custom pattern written with \\d does not match Unicode digits."""
    layout = KeyLayout.custom(pattern=r"(?P<epoch>\d+)/(?P<name>[^/]+)", template="{epoch}/{name}")
    assert layout.parse("level_zero/data/123/x") == ParsedKey(None, 123, "x")
    assert layout.parse("level_zero/data/\u0661\u0662\u0663/x") is None


def test_padded_custom_layout_with_prefix() -> None:
    """A padded custom layout needs the exact width and round-trips through format."""
    key = "bucket/l0/042/v1-000000000005/abc"
    assert PADDED.parse(key) == ParsedKey(prefix=42, epoch=5, name="abc")
    assert PADDED.format(42, 5, "abc") == key
    assert PADDED.parse("bucket/l0/042/v1-05/abc") is None
    assert PADDED.parse("bucket/l0/042/v1-0000000000005/abc") is None
    assert PADDED.padded
    assert PADDED.has_prefix
    assert PADDED.prefix_dir(42) == "bucket/l0/042/"
    assert PADDED.max_epoch == 10**12 - 1


def test_padded_width_beyond_int64_rejects_overflow() -> None:
    """With 19 padded digits, epochs above int64 max do not parse."""
    layout = KeyLayout.custom(
        root="r",
        pattern=r"(?P<epoch>[0-9]+)/(?P<name>[^/]+)",
        epoch_width=19,
        template="{epoch:019d}/{name}",
    )
    assert layout.parse(f"r/{EPOCH_MAX}/x") == ParsedKey(None, EPOCH_MAX, "x")
    assert layout.parse("r/9999999999999999999/x") is None
    assert layout.max_epoch == EPOCH_MAX


def test_custom_prefix_must_be_three_ascii_digits_as_first_segment() -> None:
    """A prefix group that captures other than a 3-digit first segment does not parse."""
    layout = KeyLayout.custom(
        pattern=r"(?P<prefix>[^/]+)/(?P<epoch>[0-9]+)/(?P<name>[^/]+)",
        template="{prefix:03d}/{epoch}/{name}",
    )
    assert layout.parse("level_zero/data/123/5/x") == ParsedKey(123, 5, "x")
    for bad in ("12", "1234", "\u0661\u0662\u0663", "-12", "+12", " 12"):
        assert layout.parse(f"level_zero/data/{bad}/5/x") is None, bad
    with pytest.raises(ConfigError, match="must follow"):
        KeyLayout.custom(
            pattern=r"(?P<prefix>[0-9]{3})-(?P<epoch>[0-9]+)/(?P<name>[^/]+)",
            template="{prefix:03d}-{epoch}/{name}",
        )


def test_custom_layout_without_name_group_uses_last_segment() -> None:
    """Without a name group the name is the last path segment; the template pins the rest."""
    layout = KeyLayout.custom(
        root="r", pattern=r"(?P<epoch>[0-9]{4})/.+", epoch_width=4, template="{epoch:04d}/a/{name}"
    )
    assert layout.parse("r/0042/a/b") == ParsedKey(None, 42, "b")
    assert layout.parse("r/0042/other/b") is None  # the regex's .+ matched, the template did not
    assert layout.parse("r/0042/a/ b") is None
    assert layout.parse("r/0042/a/..") is None


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("does not compile", r"(?P<epoch>[0-9]+"),
        ("does not compile", r"(?P<epoch>[0-9]+)(?P<epoch>x)"),
        ("unicode flag", r"(?u)(?P<epoch>[0-9]+)"),
        ("no epoch group", r"(?P<prefix>[0-9]{3})/(?P<name>[^/]+)"),
        ("unnamed epoch", r"([0-9]+)/(?P<name>[^/]+)"),
        ("empty", ""),
        ("prefix not first", r"v1/(?P<prefix>[0-9]{3})/(?P<epoch>[0-9]+)/(?P<name>[^/]+)"),
    ],
)
def test_bad_custom_pattern_is_a_config_error(case: str, pattern: str) -> None:
    """A pattern that cannot describe a layout raises ConfigError naming the pattern."""
    with pytest.raises(ConfigError) as excinfo:
        KeyLayout.custom(pattern=pattern)
    assert repr(pattern) in str(excinfo.value), case


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"root": ""}, "key root"),
        ({"root": "/l0"}, "key root"),
        ({"root": "l0/"}, "key root"),
        ({"root": "a//b"}, "key root"),
        ({"root": " l0"}, "key root"),
        ({"epoch_width": 0}, "epoch width"),
        ({"epoch_width": -1}, "epoch width"),
        ({"epoch_width": 65}, "epoch width"),
        ({"template": "{epoch:s}/{name}"}, "key template"),
        ({"template": "{epoch}/{name"}, "key template"),
        ({"template": "{nope}/{epoch}/{name}"}, "key template"),
        ({"template": "{}/{epoch}/{name}"}, "key template"),
        ({"template": "{epoch}"}, "key template"),
        ({"template": "{prefix:03d}/{epoch}/{name}"}, "key template"),
    ],
)
def test_bad_custom_options_are_config_errors(kwargs: dict[str, object], needle: str) -> None:
    """A bad root, epoch width or template raises ConfigError saying which."""
    options: dict[str, object] = {"pattern": r"(?P<epoch>[0-9]+)/(?P<name>[^/]+)", **kwargs}
    with pytest.raises(ConfigError, match=needle):
        KeyLayout.custom(**options)  # type: ignore[arg-type]


def test_template_must_use_the_prefix_when_the_pattern_has_one() -> None:
    """A layout with a prefix group needs a template that writes the prefix."""
    with pytest.raises(ConfigError, match="key template"):
        KeyLayout.custom(
            pattern=r"(?P<prefix>[0-9]{3})/(?P<epoch>[0-9]+)/(?P<name>[^/]+)",
            template="{epoch}/{name}",
        )


def test_custom_layout_needs_a_template() -> None:
    """A custom pattern without a template is refused, naming the pattern and --key-template."""
    pattern = r"(?P<epoch>[0-9]+)/(?P<name>[^/]+)"
    for build in (
        lambda: KeyLayout.custom(pattern=pattern),
        lambda: KeyLayout.from_spec(pattern, "r", epoch_width=3),
    ):
        with pytest.raises(ConfigError, match="--key-template") as excinfo:
            build()
        assert repr(pattern) in str(excinfo.value)


# The finding: a pattern that matches too much reads the 3-digit prefix as the epoch.
GREEDY = KeyLayout.custom(pattern=r".*?(?P<epoch>[0-9]+).*", template="{epoch}/{name}")


def test_a_greedy_pattern_cannot_make_a_key_eligible() -> None:
    """Keys the greedy regex misreads do not parse: the template does not write them back."""
    live = "level_zero/data/417/000000000000000900/seg.log"  # prefix 417, epoch 900
    assert GREEDY._match(live) == ParsedKey(None, 417, "seg.log")  # what the regex reads
    assert GREEDY.parse(live) is None
    assert GREEDY.parse("level_zero/data/5/seg.log") == ParsedKey(None, 5, "seg.log")


def test_a_pattern_spanning_sibling_directories_is_pinned_by_its_template() -> None:
    """A leading .+ matches every directory under the root; only the template's one parses."""
    layout = KeyLayout.custom(
        root="level_zero",
        pattern=r".+/(?P<epoch>[0-9]{18})/(?P<name>[^/]+)",
        epoch_width=18,
        template="data/417/{epoch:018d}/{name}",
    )
    ours = f"level_zero/data/417/{5:018d}/x"
    assert layout.parse(ours) == ParsedKey(None, 5, "x")
    for sibling in (
        f"level_zero/data2/417/{5:018d}/x",
        f"level_zero/data/418/{5:018d}/x",
        f"level_zero/other/data/417/{5:018d}/x",
    ):
        assert layout._match(sibling) is not None, sibling  # the regex alone would take it
        assert layout.parse(sibling) is None, sibling


@pytest.mark.parametrize(
    ("case", "options", "needle"),
    [
        ("epoch runs into name", {"template": "{epoch}{name}"}, "must follow {epoch}"),
        ("epoch runs into digits", {"template": "{epoch}0/{name}"}, "must follow {epoch}"),
        ("name runs on", {"template": "{epoch}/{name}.log"}, "must end {name}"),
        ("name then epoch", {"template": "{name}-{epoch}"}, "must end {name}"),
        ("parent segment", {"template": "../{epoch}/{name}"}, "'..' path segment"),
        ("dot segment", {"template": "./{epoch}/{name}"}, "'..' path segment"),
        ("empty segment", {"template": "{epoch}//{name}"}, "empty"),
        ("leading slash", {"template": "/{epoch}/{name}"}, "empty"),
        ("conversion", {"template": "{epoch}/{name!r}"}, "without a conversion"),
        ("nested spec", {"template": "{epoch}/{name:{epoch}}"}, "nests a field"),
        ("padded name", {"template": "{epoch}/{name:>9}"}, "writes name 'x'"),
        ("unwanted padding", {"template": "{epoch:05d}/{name}"}, "as plain digits"),
        ("grouping", {"template": "{epoch:,}/{name}"}, "'12,345'"),
        ("wrong width", {"template": "{epoch:04d}/{name}", "epoch_width": 5}, "zero padded to"),
        ("control character", {"template": "{epoch}/\x01-{name}"}, "U+0001"),
        ("carriage return", {"template": "{epoch}/\r{name}"}, "carriage return"),
        ("root parent", {"template": "{epoch}/{name}", "root": "a/../b"}, "key root"),
        ("root control", {"template": "{epoch}/{name}", "root": "a\x02b"}, "key root"),
    ],
)
def test_templates_that_cannot_prove_a_key_are_refused(
    case: str, options: dict[str, object], needle: str
) -> None:
    """Ambiguous, root-leaving, non-canonical or unsendable templates are ConfigErrors."""
    with pytest.raises(ConfigError, match=re.escape(needle)):
        KeyLayout.custom(pattern=r"(?P<epoch>[0-9]+)/(?P<name>[^/]+)", **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("{prefix}/{epoch}/{name}", "writes prefix 0 as '0'"),
        ("x/{prefix:03d}/{epoch}/{name}", "must open with {prefix:03d}/"),
        ("{prefix:03d}{epoch}/{name}", "must follow {prefix:03d} with '/'"),
    ],
)
def test_prefix_templates_must_write_the_first_segment(template: str, needle: str) -> None:
    """A prefix is written as three digits opening the key, then '/'."""
    with pytest.raises(ConfigError, match=re.escape(needle)):
        KeyLayout.custom(
            pattern=r"(?P<prefix>[0-9]{3})/?(?P<epoch>[0-9]+)/(?P<name>[^/]+)", template=template
        )


def test_from_spec() -> None:
    """from_spec maps 'default' to the default layout and anything else to a pattern."""
    assert KeyLayout.from_spec("default", "r") == KeyLayout.default("r")
    custom = KeyLayout.from_spec(
        r"(?P<epoch>[0-9]+)/(?P<name>[^/]+)", "r", epoch_width=5, template="{epoch:05d}/{name}"
    )
    assert custom.parse("r/00005/x") == ParsedKey(None, 5, "x")
    with pytest.raises(ConfigError, match="default layout"):
        KeyLayout.from_spec("default", epoch_width=5)
    with pytest.raises(ConfigError, match="no named group 'epoch'"):
        KeyLayout.from_spec("defualt")


def test_prefix_dir_errors() -> None:
    """prefix_dir refuses out-of-range prefixes and layouts without prefixes."""
    with pytest.raises(ValueError, match="prefix 1000"):
        DEFAULT.prefix_dir(1000)
    with pytest.raises(ValueError, match="prefix -1"):
        DEFAULT.prefix_dir(-1)
    with pytest.raises(ConfigError, match="no 'prefix' group"):
        LOOSE.prefix_dir(0)


@pytest.mark.parametrize(
    ("prefix", "epoch", "name", "needle"),
    [
        (-1, 1, "x", "prefix -1"),
        (1000, 1, "x", "prefix 1000"),
        (None, 1, "x", "prefix None"),
        (1, -1, "x", "epoch -1"),
        (1, 10**18, "x", "epoch 1000000000000000000"),
        (1, 1, "", "object name ''"),
        (1, 1, "a/b", "object name 'a/b'"),
        (1, 1, " a", "object name ' a'"),
        (1, 1, "a\n", "object name"),
        (1, 1, ".", "object name '.'"),
        (1, 1, "..", "object name '..'"),
    ],
)
def test_default_format_refuses_values_it_cannot_write(
    prefix: int | None, epoch: int, name: str, needle: str
) -> None:
    """format raises ValueError naming the bad value."""
    with pytest.raises(ValueError, match=re.escape(needle)):
        DEFAULT.format(prefix, epoch, name)


def test_custom_format_refuses_values_it_cannot_write() -> None:
    """A custom layout refuses a prefix it has no room for and names its pattern rejects."""
    with pytest.raises(ValueError, match="has no prefix"):
        LOOSE.format(3, 1, "x")
    with pytest.raises(ValueError, match="epoch"):
        PADDED.format(1, 10**12, "x")
    hex_names = KeyLayout.custom(
        pattern=r"(?P<epoch>[0-9]+)/(?P<name>[0-9a-f]+)", template="{epoch}/{name}"
    )
    with pytest.raises(ValueError, match="does not parse back"):
        hex_names.format(None, 1, "xyz")


# --- properties of parse and format -------------------------------------------------

names = st.text(
    alphabet=st.characters(exclude_characters="/", exclude_categories=["Cs"]),
    min_size=1,
    max_size=40,
).filter(lambda n: n == n.strip() and n not in {".", ".."})


@no_db
@given(prefix=st.integers(0, 999), epoch=st.integers(0, 10**18 - 1), name=names)
def test_default_parse_inverts_format(prefix: int, epoch: int, name: str) -> None:
    """parse(format(x)) == x for every value the default layout can hold."""
    key = DEFAULT.format(prefix, epoch, name)
    assert DEFAULT.parse(key) == ParsedKey(prefix, epoch, name)


@no_db
@given(epoch=st.integers(0, EPOCH_MAX), name=names)
def test_unpadded_parse_inverts_format(epoch: int, name: str) -> None:
    """parse(format(x)) == x for an unpadded custom layout too."""
    assert LOOSE.parse(LOOSE.format(None, epoch, name)) == ParsedKey(None, epoch, name)


# Pieces that are often right and often subtly wrong, so that random keys do parse.
_DIGITS = "0123456789"
_TRICKY = "0123456789\u0661\u0665\uff10\uff15\u00b2+-_ ./a"
_segments = st.one_of(
    st.text(alphabet=_DIGITS, min_size=3, max_size=3),
    st.text(alphabet=_DIGITS, min_size=18, max_size=18),
    st.text(alphabet=_DIGITS, min_size=1, max_size=20),
    st.text(alphabet=_TRICKY, max_size=20),
    names,
    st.text(max_size=10),
)
_roots = st.sampled_from(
    ["level_zero/data", "level_zero/data/", "level_zero", "l0", "l0/e=", "bucket/l0", ""]
)
_three = st.text(alphabet=_DIGITS, min_size=3, max_size=3) | st.text(alphabet=_TRICKY, max_size=4)
_keys = st.one_of(
    st.text(),
    st.builds(lambda root, segs: "/".join([root, *segs]), _roots, st.lists(_segments, max_size=5)),
    st.builds(
        lambda p, e, n: f"level_zero/data/{p}/{e}/{n}",
        _three,
        st.text(alphabet=_DIGITS, min_size=18, max_size=18) | st.text(alphabet=_TRICKY, max_size=5),
        names | st.text(max_size=5),
    ),
    st.builds(
        lambda p, e, n: f"bucket/l0/{p}/v1-{e}/{n}",
        _three,
        st.text(alphabet=_DIGITS, min_size=12, max_size=12) | st.text(alphabet=_TRICKY, max_size=5),
        names | st.text(max_size=5),
    ),
    st.builds(
        lambda e, n: f"l0/e={e}/{n}",
        st.text(alphabet=_DIGITS, min_size=1, max_size=21) | st.text(alphabet=_TRICKY, max_size=5),
        names | st.text(max_size=5),
    ),
)


@no_db
@pytest.mark.parametrize(
    "layout", [DEFAULT, LOOSE, PADDED, GREEDY], ids=["default", "loose", "padded", "greedy"]
)
@given(key=_keys)
def test_a_key_parses_only_if_format_writes_it_back(layout: KeyLayout, key: str) -> None:
    """For any string s, if parse(s) is not None then format(parse(s)) == s."""
    parsed = layout.parse(key)
    if parsed is not None:
        assert layout.format(parsed.prefix, parsed.epoch, parsed.name) == key


# --- sharding -------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 3, 7, 10, 999, 1000])
def test_shard_ranges_tile_all_prefixes(count: int) -> None:
    """Shards cover 0-999 once, in order; sizes differ by at most one, bigger ones first."""
    ranges = [shard_range(index, count) for index in range(count)]
    covered = [p for lo, hi in ranges for p in range(lo, hi + 1)]
    assert covered == list(range(1000))
    sizes = [hi - lo + 1 for lo, hi in ranges]
    assert max(sizes) - min(sizes) <= 1
    remainder = 1000 % count
    assert sizes == [1000 // count + 1] * remainder + [1000 // count] * (count - remainder)


def test_shard_range_examples() -> None:
    """Concrete shard ranges for a few counts and a sub-range."""
    assert shard_range(0, 1) == (0, 999)
    assert [shard_range(i, 3) for i in range(3)] == [(0, 333), (334, 666), (667, 999)]
    assert shard_range(999, 1000) == (999, 999)
    assert [shard_range(i, 2, lo=10, hi=14) for i in range(2)] == [(10, 12), (13, 14)]


@pytest.mark.parametrize(
    ("index", "count", "needle"),
    [
        (0, 0, "shard count 0"),
        (0, 1001, "shard count 1001"),
        (-1, 2, "shard index -1"),
        (2, 2, "shard index 2"),
    ],
)
def test_shard_range_rejects_bad_shards(index: int, count: int, needle: str) -> None:
    """Out-of-range shard index or count raises ConfigError naming the values."""
    with pytest.raises(ConfigError, match=needle):
        shard_range(index, count)


def test_shard_range_rejects_bad_bounds() -> None:
    """A prefix range outside 0-999 or upside down raises ConfigError."""
    for lo, hi in [(-1, 5), (5, 1000), (6, 5)]:
        with pytest.raises(ConfigError, match="prefix range"):
            shard_range(0, 1, lo=lo, hi=hi)


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (100, 199, ["1"]),
        (89, 300, ["089", "09", "1", "2", "300"]),
        (0, 999, [""]),
        (5, 5, ["005"]),
        (0, 99, ["0"]),
        (990, 999, ["99"]),
        (0, 0, ["000"]),
        (999, 999, ["999"]),
        (0, 499, ["0", "1", "2", "3", "4"]),
        (
            101,
            198,
            [*map(str, range(101, 110)), *map(str, range(11, 19)), *map(str, range(190, 199))],
        ),
    ],
)
def test_compress_range_examples(lo: int, hi: int, expected: list[str]) -> None:
    """compress_range gives the documented fewest prefixes."""
    assert compress_range(lo, hi) == expected


def test_compress_range_rejects_bad_ranges() -> None:
    """An upside-down or out-of-width range raises ValueError."""
    for lo, hi, width in [(5, 4, 3), (-1, 4, 3), (0, 1000, 3), (0, 0, 0)]:
        with pytest.raises(ValueError, match="range"):
            compress_range(lo, hi, width)


def _expand(prefix: str, width: int) -> range:
    free = width - len(prefix)
    start = int(prefix) * 10**free if prefix else 0
    return range(start, start + 10**free)


def _fewest_prefixes(lo: int, hi: int, width: int) -> int:
    """Brute force: the fewest aligned decimal blocks that tile [lo, hi] exactly."""
    fewest = {hi + 1: 0}  # fewest[n]: blocks needed to tile [n, hi]
    for start in range(hi, lo - 1, -1):
        fewest[start] = 1 + min(
            fewest[start + 10**free]
            for free in range(width + 1)
            if start % 10**free == 0 and start + 10**free - 1 <= hi
        )
    return fewest[lo]


def _check_cover(lo: int, hi: int, width: int) -> list[str]:
    prefixes = compress_range(lo, hi, width)
    assert prefixes == sorted(prefixes)
    covered = [n for prefix in prefixes for n in _expand(prefix, width)]
    assert covered == list(range(lo, hi + 1))
    # No ten siblings that could be merged into their parent.
    for parent, group in itertools.groupby(prefixes, key=lambda p: p[:-1]):
        assert len([p for p in group if len(p) == len(parent) + 1]) < 10, parent
    return prefixes


def test_compress_range_is_exact_and_minimal_for_every_two_digit_range() -> None:
    """Every [lo, hi] in 0-99 is covered exactly, by as few prefixes as brute force finds."""
    for lo in range(100):
        for hi in range(lo, 100):
            assert len(_check_cover(lo, hi, 2)) == _fewest_prefixes(lo, hi, 2), (lo, hi)


@no_db
@given(st.integers(0, 999), st.integers(0, 999))
def test_compress_range_is_exact_and_minimal(a: int, b: int) -> None:
    """Random 3-digit ranges are covered exactly, by as few prefixes as brute force finds."""
    lo, hi = min(a, b), max(a, b)
    assert len(_check_cover(lo, hi, 3)) == _fewest_prefixes(lo, hi, 3)


# --- listing prefixes -----------------------------------------------------------------


def test_listing_prefixes_of_default_layout() -> None:
    """One sweeper lists the whole root; two split it at 500."""
    assert listing_prefixes(DEFAULT, 0, 1) == ["level_zero/data/"]
    assert listing_prefixes(DEFAULT, 0, 2) == [f"level_zero/data/{d}" for d in "01234"]
    assert listing_prefixes(DEFAULT, 1, 2) == [f"level_zero/data/{d}" for d in "56789"]
    assert listing_prefixes(PADDED, 0, 1000) == ["bucket/l0/000"]


@pytest.mark.parametrize("count", [1, 2, 3, 7, 1000])
def test_listing_prefixes_select_each_key_once(count: int) -> None:
    """Every prefix dir starts with exactly one listing prefix across all shards."""
    shards = [listing_prefixes(DEFAULT, index, count) for index in range(count)]
    for prefix in range(1000):
        key = DEFAULT.format(prefix, 1, "x")
        owners = [i for i, shard in enumerate(shards) if any(key.startswith(p) for p in shard)]
        assert owners == [i for i in range(count) if prefix in _range(shard_range(i, count))]


def _range(bounds: tuple[int, int]) -> range:
    return range(bounds[0], bounds[1] + 1)


def test_listing_prefixes_without_prefix_group_allow_only_one_shard() -> None:
    """A layout without prefixes lists its root with one sweeper and refuses sharding."""
    assert listing_prefixes(LOOSE, 0, 1) == ["l0/"]
    with pytest.raises(ConfigError, match="sharding"):
        listing_prefixes(LOOSE, 0, 2)
    with pytest.raises(ConfigError, match="sharding"):
        listing_prefixes(LOOSE, 1, 1)


def test_the_epoch_bound_is_int64_max_written_out() -> None:
    """EPOCH_MAX is 2**63 - 1 itself (not derived in the test from the constant it
    checks): an unpadded layout parses and writes 9223372036854775807 and refuses
    9223372036854775808 both ways."""
    assert EPOCH_MAX == 9223372036854775807
    assert LOOSE.parse("l0/e=9223372036854775807/x") is not None
    assert LOOSE.parse("l0/e=9223372036854775808/x") is None
    with pytest.raises(ValueError, match="this layout holds 0-9223372036854775807"):
        LOOSE.format(None, 9223372036854775808, "x")


def test_range_errors_name_the_range_to_give() -> None:
    """A prefix, prefix range or shard index out of range says what range to give."""
    with pytest.raises(ValueError, match=r"give 0-999$"):
        DEFAULT.format(1000, 1, "x")
    with pytest.raises(ValueError, match=r"prefixes are 0-999$"):
        DEFAULT.prefix_dir(1000)
    assert DEFAULT.prefix_dir(0) == "level_zero/data/000/"
    with pytest.raises(ConfigError, match=r"within 0-999$"):
        shard_range(0, 1, 5, 1000)
    with pytest.raises(ConfigError, match=r"number the sweepers 0-3$"):
        shard_range(4, 4)


# -- the default layout's sliced parse holds the same verdicts as match + round trip --

_HOSTILE = "0189/ \t\n.a_-\x00\x85\u00a0\u0663\uff10\u00b2+_é"
_SEGMENT = st.text(alphabet=_HOSTILE, max_size=20)


def _round_trip_parse(layout: KeyLayout, key: str) -> ParsedKey | None:
    """What `parse` does for layouts without a fixed-width fast path."""
    parsed = layout._match(key)
    if parsed is None or layout._write(parsed.prefix, parsed.epoch, parsed.name) != key:
        return None
    return parsed


def _mutated_keys() -> st.SearchStrategy[str]:
    """Default keys whose fields are each well formed, or often one hostile variant."""

    def field(good: st.SearchStrategy[str], *bad: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(good, good, good, *bad)

    digits = "0123456789\u0663\uff10\u00b2"
    prefix = field(
        st.integers(0, 999).map(lambda n: f"{n:03d}"),
        _SEGMENT,
        st.text(alphabet=digits, min_size=3, max_size=3),
    )
    epoch = field(
        st.integers(0, 10**18 - 1).map(lambda n: f"{n:018d}"),
        _SEGMENT,
        st.text(alphabet=digits, min_size=17, max_size=19),
    )
    names = [".", "..", " x", "x ", "x\n", "\x85x", "a/b", "", "\u00a0", "ok"]
    name = st.one_of(st.sampled_from(["x", "0b8e-uuid"]), st.sampled_from(names), _SEGMENT)
    root = field(
        st.just(DEFAULT_ROOT + "/"),
        st.sampled_from([DEFAULT_ROOT, "level_zero/dat/", "", " level_zero/data/"]),
    )
    sep = field(st.just("/"), st.sampled_from(["//", "", "\\", "/ "]))
    return st.builds(
        lambda r, p, s1, e, s2, n: r + p + s1 + e + s2 + n, root, prefix, sep, epoch, sep, name
    )


@settings(database=None, max_examples=600)
@given(st.one_of(_mutated_keys(), st.text(alphabet=_HOSTILE + "level_zro/", max_size=60)))
def test_fixed_width_parse_has_the_round_trip_verdicts(key: str) -> None:
    """The sliced parse of the default layout accepts exactly what match + round trip does."""
    assert DEFAULT._fixed
    assert DEFAULT.parse(key) == _round_trip_parse(DEFAULT, key)


def test_fixed_width_parse_examples() -> None:
    """Examples a bug in the slicing would break (the property test's anchors)."""
    assert DEFAULT.parse(GOOD) == ParsedKey(417, 12345, "0b8e-uuid")
    assert DEFAULT.parse(f"level_zero/data/999/{'9' * 18}/n") == ParsedKey(999, 10**18 - 1, "n")
    refused = [
        GOOD.replace("/417/", "/41\u0663/"),  # Arabic-Indic digit
        GOOD.replace(EPOCH18, "\uff10" + EPOCH18[1:]),  # fullwidth zero
        GOOD.replace(EPOCH18, EPOCH18[1:]),  # 17 digits
        GOOD.replace(EPOCH18, "0" + EPOCH18),  # 19 digits
        GOOD + "/more",  # an extra segment
        GOOD + " ",  # trailing whitespace
        "level_zero/data/417/" + EPOCH18 + "/",  # no name
        "level_zero/data/417/" + EPOCH18 + "/..",
        "level_zero/data/417//" + EPOCH18 + "/x",
        "level_zero/dataa/417/" + EPOCH18 + "/x",
        "level_zero/data/417x" + EPOCH18 + "/x",  # one separator wrong, same length
        "level_zero/data/417/" + EPOCH18 + "\\x",
    ]
    for key in refused:
        assert DEFAULT.parse(key) is None, key
        assert _round_trip_parse(DEFAULT, key) is None, key
    # a custom layout spelling the default out in other words takes the round trip
    assert not KeyLayout(
        pattern=r"(?P<prefix>[0-9]{3})/(?P<epoch>[0-9]{18})/(?P<name>.+)",
        template="{prefix:03d}/{epoch:018d}/{name}",
    )._fixed


def test_read_fields_reads_what_the_pattern_matches_without_the_template_proof() -> None:
    """`read_fields` (for explaining, never deleting) gives the pattern's fields of a key
    the template does not give back, where `parse` gives None; junk gives None to both."""
    pattern = r"(?P<prefix>[0-9]{3})/[a-z](?P<epoch>[0-9]+)/(?P<name>[^/]+)"
    layout = KeyLayout.custom(pattern=pattern, root="r", template="{prefix:03d}/e{epoch}/{name}")
    assert layout.parse("r/007/x12/k") is None
    assert layout.read_fields("r/007/x12/k") == ParsedKey(7, 12, "k")
    assert layout.read_fields("r/007/junk") is None


@settings(database=None, max_examples=300)
@given(
    st.lists(
        st.one_of(_mutated_keys(), st.text(alphabet=_HOSTILE + "level_zro/", max_size=60)),
        max_size=12,
    )
)
def test_a_page_of_epochs_is_what_parse_reads_key_by_key(keys: list[str]) -> None:
    """`parse_epochs` (one regex match a key for the default layout) gives each key's
    epoch exactly when `parse` accepts it, -1 otherwise; so does a custom layout's."""
    for layout in (DEFAULT, LOOSE, PADDED):
        expected = [-1 if (parsed := layout.parse(key)) is None else parsed.epoch for key in keys]
        assert layout.parse_epochs(keys) == expected


def test_a_page_of_epochs_examples() -> None:
    """The property test's anchors: a good key, and names `parse` refuses after the match."""
    names = ["x", ".", "..", " x", "x ", "\u00a0x", "x\n"]
    keys = [f"level_zero/data/417/{EPOCH18}/{name}" for name in names]
    assert DEFAULT.parse_epochs(keys) == [12345, -1, -1, -1, -1, -1, -1]
    assert DEFAULT.parse_epochs([GOOD, GOOD + "/more", "elsewhere"]) == [12345, -1, -1]
