"""A key a round selected for deletion, with what the accounting and the journal need."""

from __future__ import annotations

from dataclasses import dataclass

from gcd.rules.versions import version_target

__all__ = ["Candidate"]


@dataclass(slots=True)
class Candidate:
    """A key selected for deletion, with what the accounting needs.

    Not frozen, though nothing changes one once made: a frozen dataclass's constructor
    sets each field through `object.__setattr__`, ~1 us more for every key a round
    deletes (bench/RESULTS.md section 41)."""

    key: str
    size: int
    epoch: int
    version_id: str | None = None
    """Set on a versioned bucket: the version (or delete marker) to delete."""
    marker: bool = False
    """True for a delete marker (no bytes)."""
    hides: tuple[str, ...] = ()
    """Set when the key is hidden behind a new delete marker (an undo window on a
    versioned bucket, `gcd.rules.undo`): the version ids it keeps, newest first."""
    reclaim: bool = False
    """True for a version or marker freed by an undo window's reclaim."""
    generation: str | None = None
    """GCS: the generation a plain delete removes (journaled in ``hides``: what a restore
    of the soft-deleted object names)."""

    @property
    def target(self) -> str:
        """What the store's `delete_batch` is given (`gcd.rules.versions`)."""
        return version_target(self.key, self.version_id)
