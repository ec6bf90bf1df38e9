"""The deletion journal: every delete request written down before its answer is trusted.

`records` (writing and reading the segments of records), `index` (the key index of a
segment), `anchor` (each sweeper's last record, anchored in etcd and the audit prefix),
`check` (`gcd journal verify`), `search` (who deleted a key, when, why), `prune`
(retention), `places` (where a journal lives). docs/reliability.md explains the guarantees.

May import: the kernel (`l0gc`), `gcd.rules`, `gcd.storage`, `gcd.observe`.
"""
