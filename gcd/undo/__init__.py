"""The undo window and `gcd restore`: deletions kept reversible, and reversed.

`window` (hide now, reclaim after the window: the ledger of hidden keys), `mhistory` (M's
history in etcd, for stores without versions), `restore` (bringing journaled deletions
back), `trust` (which journal records a restore may act on).

May import: the kernel (`l0gc`), `gcd.rules`, `gcd.storage`, `gcd.observe`, `gcd.journal`.
"""
