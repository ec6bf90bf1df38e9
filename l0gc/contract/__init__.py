"""The etcd contract, pure: the documents both sides read and write, and their rules.

`kv` (the key-value interface), `record` (a partition record), `namespace` (partition
names, publication, the pause marker), `binding` (a namespace bound to its storage),
`safe_epoch` and `gcindex` (the global M, in one read or change by change),
`journal_anchor` (a journal's anchor), `members` (replica members, claims and the
rendezvous assignment). docs/etcd-contract.md is the reference.

May import `l0gc.errors`, `l0gc.strictjson` and the standard library's data modules: no
I/O, no clock (tests/test_layers.py).
"""
