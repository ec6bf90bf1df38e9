"""Object key layouts: how a key carries its epoch, and how strictly the sweeper reads it.

Design notes: docs/internals/rules.md, `gcd.rules.layout`.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from gcd.rules.xmlkeys import xml_unsafe_reason
from l0gc.errors import ConfigError

__all__ = [
    "DEFAULT_EPOCH_WIDTH",
    "DEFAULT_PATTERN",
    "DEFAULT_ROOT",
    "DEFAULT_TEMPLATE",
    "EPOCH_MAX",
    "PREFIX_COUNT",
    "PREFIX_WIDTH",
    "KeyLayout",
    "ParsedKey",
    "compress_range",
    "listing_prefixes",
    "shard_range",
]

DEFAULT_ROOT: Final = "level_zero/data"
DEFAULT_PATTERN: Final = r"(?P<prefix>[0-9]{3})/(?P<epoch>[0-9]{18})/(?P<name>[^/]+)"
DEFAULT_EPOCH_WIDTH: Final = 18
DEFAULT_TEMPLATE: Final = "{prefix:03d}/{epoch:018d}/{name}"
PREFIX_COUNT: Final = 1000  # prefixes 000-999
PREFIX_WIDTH: Final = 3
EPOCH_MAX: Final = 2**63 - 1  # epochs are signed 64-bit integers everywhere

# int() refuses strings over 4300 digits; no sane layout pads an epoch beyond this.
_MAX_EPOCH_WIDTH: Final = 64
_UNPADDED_MAX_DIGITS: Final = len(str(EPOCH_MAX))
_FIXED_NAME_AT: Final = PREFIX_WIDTH + 1 + DEFAULT_EPOCH_WIDTH + 1  # "DDD/" epoch "/"
_TEMPLATE_FIELDS: Final = frozenset({"prefix", "epoch", "name"})


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """The fields of a key that parsed: `prefix` is None when the layout has none."""

    prefix: int | None
    epoch: int
    name: str


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """A key layout; `KeyLayout()` is the default. Validated when constructed."""

    root: str = DEFAULT_ROOT
    pattern: str = DEFAULT_PATTERN
    epoch_width: int | None = DEFAULT_EPOCH_WIDTH
    template: str = DEFAULT_TEMPLATE
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _fixed: bool = field(init=False, repr=False, compare=False)
    _fixed_regex: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_root(self.root)
        regex = _compile_pattern(self.pattern)
        _check_epoch_width(self.epoch_width)
        given: object = self.template  # typed str, but from_spec and custom pass None through
        if not isinstance(given, str):
            msg = (
                f"key pattern {self.pattern!r} has no key template; give --key-template "
                f"(e.g. {DEFAULT_TEMPLATE!r}): a key is deleted only if formatting the fields "
                f"the pattern read gives the key back exactly"
            )
            raise ConfigError(msg)
        _check_template(self.template, self.pattern, "prefix" in regex.groupindex, self.epoch_width)
        object.__setattr__(self, "_regex", regex)
        fixed = (self.pattern, self.template, self.epoch_width) == (
            DEFAULT_PATTERN,
            DEFAULT_TEMPLATE,
            DEFAULT_EPOCH_WIDTH,
        )
        object.__setattr__(self, "_fixed", fixed)
        # The default layout's keys in one match: root, 3 digits, 18 digits, a name with
        # no '/' (its other checks, `_is_valid_name`, are made on the name matched).
        fixed_regex = re.compile(
            re.escape(self.listing_root) + r"[0-9]{3}/([0-9]{18})/([^/]+)", re.ASCII
        )
        object.__setattr__(self, "_fixed_regex", fixed_regex if fixed else None)

    @classmethod
    def default(cls, root: str = DEFAULT_ROOT) -> KeyLayout:
        """The Redpanda-compatible layout ``{root}/{prefix:03d}/{epoch:018d}/{name}``."""
        return cls(root=root)

    @classmethod
    def custom(
        cls,
        *,
        pattern: str,
        root: str = DEFAULT_ROOT,
        epoch_width: int | None = None,
        template: str | None = None,
    ) -> KeyLayout:
        """A layout given by a regex over the key after ``{root}/`` and its template.

        `template` is required (None is a ConfigError saying so); see the module docs.
        """
        given: str = template  # type: ignore[assignment]  # None is refused, with a reason
        return cls(root=root, pattern=pattern, epoch_width=epoch_width, template=given)

    @classmethod
    def from_spec(
        cls,
        spec: str,
        root: str = DEFAULT_ROOT,
        *,
        epoch_width: int | None = None,
        template: str | None = None,
    ) -> KeyLayout:
        """The CLI's view: ``"default"`` (``--layout default``) or a regex (``--key-pattern``,
        which needs ``--key-template``)."""
        if spec == "default":
            if epoch_width is not None or template is not None:
                msg = (
                    f"the default layout has a fixed epoch width and template; got "
                    f"epoch_width={epoch_width!r}, template={template!r}: drop them, "
                    f"or give a key pattern instead of 'default'"
                )
                raise ConfigError(msg)
            return cls.default(root)
        return cls.custom(pattern=spec, root=root, epoch_width=epoch_width, template=template)

    @property
    def padded(self) -> bool:
        """True when the epoch is fixed width, so key order is epoch order in a prefix."""
        return self.epoch_width is not None

    @property
    def has_prefix(self) -> bool:
        """True when keys carry a 000-999 prefix (required for sharding)."""
        return "prefix" in self._regex.groupindex

    @property
    def listing_root(self) -> str:
        """``root + "/"``: every key of this layout starts with it."""
        return self.root + "/"

    @property
    def max_epoch(self) -> int:
        """The largest epoch this layout can hold."""
        if self.epoch_width is None:
            return EPOCH_MAX
        largest: int = 10**self.epoch_width - 1
        return min(EPOCH_MAX, largest)

    def prefix_dir(self, prefix: int) -> str:
        """``"{root}/{prefix:03d}/"``: the listing prefix of one prefix's keys."""
        if not self.has_prefix:
            msg = f"key pattern {self.pattern!r} has no 'prefix' group, so it has no prefix dirs"
            raise ConfigError(msg)
        if not 0 <= prefix < PREFIX_COUNT:
            msg = f"prefix {prefix!r} is out of range; prefixes are 0-{PREFIX_COUNT - 1}"
            raise ValueError(msg)
        return f"{self.listing_root}{prefix:03d}/"

    def parse(self, key: str) -> ParsedKey | None:
        """The key's fields, or None for any key this layout could not have produced.

        Fields are returned only when the template writes them back as exactly `key`.
        The default layout's fixed widths are read by slicing (`_parse_fixed`), with
        the same verdicts as the match and round trip every other layout takes.
        """
        if self._fixed:
            return self._parse_fixed(key)
        parsed = self._match(key)
        if parsed is None or self._write(parsed.prefix, parsed.epoch, parsed.name) != key:
            return None
        return parsed

    def parse_epochs(self, keys: Iterable[str]) -> list[int]:
        """The epoch of each key, -1 where `parse` says None: a page's keys at once.

        The default layout's keys are read by one regex match each (no `ParsedKey`, no
        call per key); tests/gcd/rules/test_layout.py holds this equal to `parse`."""
        regex = self._fixed_regex
        if regex is None:
            return [-1 if (parsed := self.parse(key)) is None else parsed.epoch for key in keys]
        epochs: list[int] = []
        append = epochs.append
        match = regex.fullmatch
        for key in keys:
            found = match(key)
            if found is None:
                append(-1)
                continue
            epoch, name = found.groups()
            append(int(epoch) if name == name.strip() and name not in _DOTS else -1)
        return epochs

    def read_fields(self, key: str) -> ParsedKey | None:
        """The fields the pattern reads from `key`, NOT proven by the template: for telling
        a person why a key does not parse (`gcd.rules.explain`), never for deleting."""
        return self._match(key)

    def _parse_fixed(self, key: str) -> ParsedKey | None:
        """`parse` for the default layout: ``{root}/DDD/`` + 18 digits + ``/{name}``.

        Every key this accepts matches the default pattern and formats back to itself
        (the widths are fixed, the digits ASCII, the name valid), and every key it refuses
        fails one of them; tests/gcd/rules/test_layout.py holds the two paths equal.
        """
        root = self.listing_root
        start = len(root)
        name_at = start + _FIXED_NAME_AT
        if len(key) <= name_at or not key.startswith(root):
            return None
        if key[start + PREFIX_WIDTH] != "/" or key[name_at - 1] != "/":
            return None
        prefix = key[start : start + PREFIX_WIDTH]
        epoch = key[start + PREFIX_WIDTH + 1 : name_at - 1]
        if not (_is_ascii_digits(prefix) and _is_ascii_digits(epoch)):
            return None
        name = key[name_at:]
        if "/" in name or not _is_valid_name(name):
            return None
        return ParsedKey(prefix=int(prefix), epoch=int(epoch), name=name)

    def _write(self, prefix: int | None, epoch: int, name: str) -> str:
        return self.listing_root + self.template.format(prefix=prefix, epoch=epoch, name=name)

    def _match(self, key: str) -> ParsedKey | None:
        """The fields the pattern reads from `key`, each checked, not yet proven."""
        root = self.listing_root
        if not key.startswith(root) or key != key.strip():
            return None
        relative = key[len(root) :]
        if "" in relative.split("/"):
            return None
        match = self._regex.fullmatch(relative)
        if match is None:
            return None
        epoch = _parse_epoch(match.group("epoch"), self.epoch_width)
        if epoch is None:
            return None
        prefix: int | None = None
        if self.has_prefix:
            text = match.group("prefix")
            if text is None or match.span("prefix") != (0, PREFIX_WIDTH):
                return None
            if not _is_ascii_digits(text) or relative[PREFIX_WIDTH : PREFIX_WIDTH + 1] != "/":
                return None
            prefix = int(text)
        if "name" in self._regex.groupindex:
            name = match.group("name")
        else:
            name = relative.rpartition("/")[2]
        if name is None or not _is_valid_name(name):
            return None
        return ParsedKey(prefix=prefix, epoch=epoch, name=name)

    def format(self, prefix: int | None, epoch: int, name: str) -> str:
        """The key for these fields; the inverse of `parse`. ValueError if they do not fit."""
        if self.has_prefix:
            if prefix is None or not 0 <= prefix < PREFIX_COUNT:
                msg = f"prefix {prefix!r} is out of range; give 0-{PREFIX_COUNT - 1}"
                raise ValueError(msg)
        elif prefix is not None:
            msg = f"prefix {prefix!r} given, but key pattern {self.pattern!r} has no prefix"
            raise ValueError(msg)
        if not 0 <= epoch <= self.max_epoch:
            msg = f"epoch {epoch!r} is out of range; this layout holds 0-{self.max_epoch}"
            raise ValueError(msg)
        if not _is_valid_name(name):
            msg = (
                f"object name {name!r} is invalid; give a non-empty name without '/', "
                f"not '.' or '..', with no leading or trailing whitespace"
            )
            raise ValueError(msg)
        key = self._write(prefix, epoch, name)
        if self.parse(key) != ParsedKey(prefix=prefix, epoch=epoch, name=name):
            msg = (
                f"key {key!r} made by template {self.template!r} does not parse back with "
                f"pattern {self.pattern!r}; the name does not fit the pattern, or the "
                f"template and the pattern disagree"
            )
            raise ValueError(msg)
        return key


def shard_range(
    shard_index: int, shard_count: int, lo: int = 0, hi: int = PREFIX_COUNT - 1
) -> tuple[int, int]:
    """Shard `shard_index`'s inclusive prefix range; the first `remainder` shards get one more."""
    if not 0 <= lo <= hi < PREFIX_COUNT:
        msg = f"prefix range [{lo}, {hi}] is not an ordered range within 0-{PREFIX_COUNT - 1}"
        raise ConfigError(msg)
    size = hi - lo + 1
    if not 1 <= shard_count <= size:
        msg = f"shard count {shard_count} is out of range; give 1-{size} (one prefix at least each)"
        raise ConfigError(msg)
    if not 0 <= shard_index < shard_count:
        msg = (
            f"shard index {shard_index} is out of range for shard count {shard_count}; "
            f"number the sweepers 0-{shard_count - 1}"
        )
        raise ConfigError(msg)
    base, remainder = divmod(size, shard_count)
    start = lo + shard_index * base + min(shard_index, remainder)
    end = start + base - 1 + (1 if shard_index < remainder else 0)
    return start, end


def compress_range(lo: int, hi: int, width: int = PREFIX_WIDTH) -> list[str]:
    """The fewest decimal prefixes whose `width`-digit numbers are exactly [lo, hi], sorted.

    Greedy from `lo`: take the largest aligned block (10**k numbers sharing a prefix)
    that starts there and ends by `hi`. As with CIDR blocks, this is minimal. The
    empty string stands for every number, i.e. the whole root.
    """
    if width < 1 or not 0 <= lo <= hi < 10**width:
        msg = f"range [{lo}, {hi}] is not an ordered range of {width}-digit numbers"
        raise ValueError(msg)
    prefixes: list[str] = []
    current = lo
    while current <= hi:
        free = 0  # trailing digits the prefix leaves free
        while free < width:
            block = 10 ** (free + 1)
            if current % block != 0 or current + block - 1 > hi:
                break
            free += 1
        digits = width - free
        prefixes.append(f"{current // 10**free:0{digits}d}" if digits else "")
        current += 10**free
    return prefixes


def listing_prefixes(layout: KeyLayout, shard_index: int, shard_count: int) -> list[str]:
    """The S3 listing prefixes of one sweeper shard, fewest first to last in key order."""
    if not layout.has_prefix:
        if (shard_index, shard_count) != (0, 1):
            msg = (
                f"shard {shard_index} of {shard_count} requested, but key pattern "
                f"{layout.pattern!r} has no 'prefix' group and sharding splits prefixes; "
                f"run one sweeper (shard 0 of 1) or add a (?P<prefix>[0-9]{{3}}) group"
            )
            raise ConfigError(msg)
        return [layout.listing_root]
    lo, hi = shard_range(shard_index, shard_count)
    return [layout.listing_root + prefix for prefix in compress_range(lo, hi)]


def _is_ascii_digits(text: str) -> bool:
    # str.isdigit() alone accepts Arabic-Indic, fullwidth and superscript digits.
    return text.isascii() and text.isdigit()


def _parse_epoch(text: str | None, width: int | None) -> int | None:
    if text is None or not _is_ascii_digits(text):
        return None
    if width is None:
        if len(text) > 1 and text[0] == "0":
            return None  # "007" is not what format(7) writes
        if len(text) > _UNPADDED_MAX_DIGITS:
            return None  # too big; and int() would refuse over 4300 digits
    elif len(text) != width:
        return None
    epoch = int(text)
    return epoch if epoch <= EPOCH_MAX else None


_DOTS: Final = frozenset({".", ".."})


def _is_valid_name(name: str) -> bool:
    return name != "" and "/" not in name and name not in _DOTS and name == name.strip()


def _check_root(root: str) -> None:
    segments = root.split("/")
    if root != root.strip() or {"", ".", ".."} & set(segments) or xml_unsafe_reason(root):
        msg = (
            f"key root {root!r} is invalid; give a non-empty key prefix with no leading or "
            f"trailing '/', no empty, '.' or '..' segments, no control characters and no "
            f"surrounding spaces, e.g. {DEFAULT_ROOT!r}"
        )
        raise ConfigError(msg)


def _compile_pattern(pattern: str) -> re.Pattern[str]:
    try:
        regex = re.compile(pattern, re.ASCII)
    except (re.error, ValueError) as exc:  # ValueError: "(?u)" conflicts with re.ASCII
        msg = f"key pattern {pattern!r} is not a valid regular expression ({exc}); fix it"
        raise ConfigError(msg) from exc
    if "epoch" not in regex.groupindex:
        msg = (
            f"key pattern {pattern!r} has no named group 'epoch'; mark the epoch digits "
            f"with (?P<epoch>[0-9]+)"
        )
        raise ConfigError(msg)
    if "prefix" in regex.groupindex and not pattern.startswith("(?P<prefix>"):
        msg = (
            f"key pattern {pattern!r} has a 'prefix' group that does not open it; the "
            f"prefix must be the first path segment, e.g. (?P<prefix>[0-9]{{3}})/..."
        )
        raise ConfigError(msg)
    return regex


def _check_epoch_width(width: int | None) -> None:
    if width is not None and not 1 <= width <= _MAX_EPOCH_WIDTH:
        msg = (
            f"epoch width {width!r} is out of range; give 1-{_MAX_EPOCH_WIDTH} for a "
            f"zero-padded epoch, or None if the epoch is not padded"
        )
        raise ConfigError(msg)


def _check_template(template: str, pattern: str, has_prefix: bool, width: int | None) -> None:
    """Refuse a template that could not prove a key (see the module docstring)."""
    try:
        parts = list(string.Formatter().parse(template))
        template.format(prefix=0, epoch=0, name="name")
    except (ValueError, KeyError, IndexError, AttributeError, TypeError) as exc:
        msg = f"key template {template!r} cannot be formatted ({exc!r}); fix it"
        raise ConfigError(msg) from exc
    fields = {part[1] for part in parts if part[1] is not None}
    needed = {"epoch", "name"} | ({"prefix"} if has_prefix else set())
    allowed = _TEMPLATE_FIELDS if has_prefix else _TEMPLATE_FIELDS - {"prefix"}
    if not needed <= fields <= allowed:
        msg = (
            f"key template {template!r} must use exactly the fields {sorted(needed)} of "
            f"key pattern {pattern!r}, it uses {sorted(fields)}"
        )
        raise ConfigError(msg)
    problem = _template_problem(parts, has_prefix, width)
    if problem is not None:
        raise ConfigError(f"key template {template!r} {problem}")


def _template_problem(
    parts: list[tuple[str, str | None, str | None, str | None]],
    has_prefix: bool,
    width: int | None,
) -> str | None:
    """What makes a parsed template unable to prove keys, or None."""
    if has_prefix and (parts[0][0] != "" or parts[0][1] != "prefix"):
        return "must open with {prefix:03d}/: the prefix is the first path segment"
    skeleton = []
    for index, (literal, name, spec, conversion) in enumerate(parts):
        skeleton.append(literal)
        if name is None:
            continue
        skeleton.append("\0")  # a field: never a whole '.' or '..' segment by itself
        if conversion is not None:
            return f"converts {{{name}!{conversion}}}; write {{{name}}} without a conversion"
        if "{" in (spec or ""):
            return f"nests a field in the spec of {{{name}:{spec}}}; give a literal spec"
        wrong = _field_problem(name, spec or "", width)
        if wrong is not None:
            return wrong
        following = parts[index + 1][0] if index + 1 < len(parts) else ""
        after = following[:1]
        if name == "name" and after not in {"", "/"}:
            return (
                "must end {name} at a '/' or at the end of the template: a name may hold any "
                "other character, so one key could be read as different names and epochs"
            )
        if name == "epoch" and (after.isdigit() or (after == "" and index + 1 < len(parts))):
            return (
                "must follow {epoch} with a character that is not a digit (or end there), "
                "else one key could be read as different epochs"
            )
        if name == "prefix" and after != "/":
            return "must follow {prefix:03d} with '/': the prefix is the first path segment"
    text = "".join(skeleton)
    if {"", ".", ".."} & set(text.split("/")):
        return "has an empty, '.' or '..' path segment, which could leave or alias the root"
    unsafe = xml_unsafe_reason(text.replace("\0", ""))
    if unsafe is not None:
        return f"has text a DeleteObjects request cannot carry ({unsafe})"
    return None


def _field_problem(name: str, spec: str, width: int | None) -> str | None:
    """What is wrong with how the template writes one field, or None."""
    try:
        if name == "epoch":
            largest = EPOCH_MAX if width is None else min(EPOCH_MAX, 10**width - 1)
            for epoch in (0, 7, 12345, largest):
                want = str(epoch) if width is None else f"{epoch:0{width}d}"
                if format(epoch, spec) != want:
                    how = (
                        "as plain digits (--epoch-width not given)"
                        if width is None
                        else f"as digits zero padded to --epoch-width {width}"
                    )
                    return f"writes epoch {epoch} as {format(epoch, spec)!r}; write it {how}"
        elif name == "prefix":
            for prefix in (0, 7, 999):
                if format(prefix, spec) != f"{prefix:03d}":
                    return f"writes prefix {prefix} as {format(prefix, spec)!r}; use {{prefix:03d}}"
        else:
            for sample in ("x", "0b8e-uuid.log"):
                if format(sample, spec) != sample:
                    return f"writes name {sample!r} as {format(sample, spec)!r}; use plain {{name}}"
    except (ValueError, TypeError) as exc:
        return f"cannot write {name} with spec {spec!r} ({exc})"
    return None
