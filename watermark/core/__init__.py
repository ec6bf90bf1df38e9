"""The publisher's pure core: the tracker's rules, decided without I/O.

`window` (the sliding epoch window), `fencelock` and `fencebook` (the fence lock as a state
machine), `gcstate` and `snapshot` (a partition's applied window and M(p)), `assignment`
(what a replica does after reading the fleet), `fleet` (the URLs a writer may follow).
May import the standard library's data modules and `l0gc`'s pure units; no asyncio, clock,
randomness, network or file access (tests/test_layers.py).
"""
