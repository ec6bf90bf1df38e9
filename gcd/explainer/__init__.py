"""`gcd explain` without the command: why a key is kept, or who deleted it and why.

`answer` (the explanation of a key, from one etcd read and the journal), `http` (the
daemon's ``/v1/explain`` route).

May import: the kernel (`l0gc`), `gcd.rules`, `gcd.storage`, `gcd.observe`, `gcd.journal`,
`gcd.undo`, `gcd.sweep`.
"""
