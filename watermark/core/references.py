"""The references of one partition: object keys its committed, unreleased entries name.

Design notes: docs/internals/publisher.md, `watermark.core.references`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Sequence
from json.encoder import encode_basestring_ascii as encode_key

from l0gc.contract.references import (
    DEFAULT_MAX_REFERENCES,
    MAX_ENTRY_KEYS,
    MAX_REFERENCE_BYTES,
    Keys,
    References,
)
from l0gc.errors import ConfigError, InvalidRecord, ReferencesFull

__all__ = ["ReferenceSet"]


def _size(key: str) -> int:
    """The bytes `key` takes in the stored record: ASCII-only JSON, so a non-ASCII
    character or a quote takes several (the cap bounds the record, not the keys)."""
    return len(encode_key(key)) + 1  # and a comma


class ReferenceSet:
    """Per entry offset, the keys it names, until the reconciler releases them.

    ``add`` before a commit is applied raises `ReferencesFull` (nothing changes) past
    `max_keys` keys or `MAX_REFERENCE_BYTES`; ``release`` drops the entries a
    reconciler's report passes: all of them, or, when the report names the keys it
    lifted, only those (the second opinion: see the design notes).
    """

    __slots__ = (
        "_bytes",
        "_entries",
        "_keys",
        "_max_keys",
        "_stored",
        "sent",
    )

    def __init__(self, *, max_keys: int = DEFAULT_MAX_REFERENCES) -> None:
        if type(max_keys) is not int or max_keys < 1:
            raise ConfigError(
                f"max_keys must be an integer >= 1, got {max_keys!r}; the default is "
                f"{DEFAULT_MAX_REFERENCES}"
            )
        self._max_keys = max_keys
        self._entries: OrderedDict[int, tuple[str, ...]] = OrderedDict()
        self._stored: References | None = None
        """`stored()` until the next change."""
        self._keys = 0
        self._bytes = 0
        self.sent = False
        """True once the writer named references (a record then always carries them)."""

    @property
    def keys(self) -> int:
        """How many (entry, key) references are held."""
        return self._keys

    @property
    def max_keys(self) -> int:
        """The cap on `keys`."""
        return self._max_keys

    def check(self, partition: str, objects: Sequence[object]) -> tuple[str, ...]:
        """The keys of one commit, checked; raise InvalidRecord (a bad key, too many
        keys for one entry) or `ReferencesFull` (no room): the commit is refused."""
        if len(objects) > MAX_ENTRY_KEYS:
            raise InvalidRecord(
                f"partition {partition!r}: a commit names {len(objects)} objects, more than "
                f"{MAX_ENTRY_KEYS}: split the entry, or name the objects it really references"
            )
        keys = Keys.checked(objects, "objects")  # names a bad key
        self._ensure_room(partition, len(keys), keys.size)
        return keys

    def _ensure_room(self, partition: str, count: int, size: int) -> None:
        """Raise `ReferencesFull` unless `count` more keys of `size` bytes fit the caps."""
        if self._keys + count > self._max_keys or self._bytes + size > MAX_REFERENCE_BYTES:
            raise ReferencesFull(partition, self._keys, count, self._max_keys, self._bytes + size)

    def recover(
        self, partition: str, log: References, after: int, through: int
    ) -> list[tuple[int, Keys]]:
        """The entries of `log` (what a log end came with: the keys each entry of the log
        names) that this set never saw, checked: those above `after` (the last applied
        offset, -1: none), which must be at or below `through` (the log end). Raise
        ConfigError for an entry past the log end, `ReferencesFull` past the cap; nothing
        changes (``add`` each one after)."""
        wanted = [(offset, keys) for offset, keys in log.entries if offset > after]
        if wanted and wanted[-1][0] > through:
            raise ConfigError(
                f"partition {partition!r}: log_references name offset {wanted[-1][0]}, past "
                f"the log end {through}: send the keys of the log's entries from offset "
                f"{after + 1} through its end"
            )
        checked = [(offset, Keys.checked(held, "log_references")) for offset, held in wanted]
        self._ensure_room(
            partition, sum(len(k) for _, k in checked), sum(k.size for _, k in checked)
        )
        return checked

    def add(self, offset: int, keys: tuple[str, ...]) -> None:
        """Hold `keys` (from `check`) for the entry at `offset` (a new, higher offset)."""
        if not self.sent:
            self.sent, self._stored = True, None
        if not keys:
            return
        size = keys.size if isinstance(keys, Keys) else sum(map(_size, keys))
        self._entries[offset] = tuple(keys)  # a plain tuple: no attributes to keep
        self._stored = None
        self._keys += len(keys)
        self._bytes += size

    def release(self, through: int, lifted: Collection[str] | None = None) -> int:
        """Drop the references of entries at or below `through`; with `lifted`, only the
        keys named there (the others stay: the report passed an entry whose object it
        did not lift). Return how many references were dropped."""
        dropped = 0
        passed = []
        for offset in self._entries:  # rising: stop at the first entry not passed
            if offset > through:
                break
            passed.append(offset)
        for offset in passed:
            keys = self._entries[offset]
            kept = () if lifted is None else tuple(k for k in keys if k not in lifted)
            if len(kept) == len(keys):
                continue  # nothing of this entry lifted
            if kept:
                self._entries[offset] = kept
            else:
                del self._entries[offset]
            self._stored = None
            gone = [k for k in keys if k not in kept] if kept else keys
            dropped += len(gone)
            self._keys -= len(gone)
            self._bytes -= sum(_size(key) for key in gone)
        return dropped

    def stored(self) -> References | None:
        """The record field: None while the writer never sent references."""
        if not self.sent:
            return None
        if self._stored is None:  # once per change: publishes in between reuse it (and
            self._stored = References(tuple(self._entries.items()))  # its JSON text)
        return self._stored

    @classmethod
    def restore(cls, stored: References | None, *, max_keys: int) -> ReferenceSet:
        """A set holding what a record stored (a new owner keeps the old one's)."""
        refs = cls(max_keys=max_keys)
        if stored is not None:
            refs.sent = True
            for offset, keys in stored.entries:
                refs.add(offset, keys)
        return refs
