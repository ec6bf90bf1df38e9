"""etcd I/O: the contract of `l0gc.contract` applied to a real (or in-memory) etcd.

`client` (`EtcdKV`, aetcd behind `l0gc.contract.kv.KV`), `memory` (`MemoryKV`, for unit
tests and the simulation), `store` (`WatermarkStore`), `follow` (`GcFollower`: M kept
current from a watch), `watch`, `settings` (where etcd is; opening the client), `session`
(`LeaseSession`: one lease kept alive), `liveness` (whose owner is running). May import
the kernel below it (`l0gc.contract`, `l0gc.options`, `l0gc.logs`, `l0gc.errors`) and aetcd.
"""
