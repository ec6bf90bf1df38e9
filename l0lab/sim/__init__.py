"""Deterministic simulation of the whole l0gc system, with faults, in virtual time.

Why
---
l0gc deletes data. Unit tests check each rule; this checks that the rules together
keep every object that is still needed, under the interleavings and failures a real
deployment sees, and that garbage does get collected once things calm down.

What runs
---------
The real code: `watermark.service.publisher.Publisher` (hosting `PartitionGcState` and the
`FencingGuard` per partition), `watermark.service.clock.EpochClock` and `stamp_epoch` for
writers, `l0gc.etcd.store.WatermarkStore` on `l0gc.etcd.memory.MemoryKV` (so the
ownership fencing, monotonic M(p), registration and `compute_safe_epoch` are the
production ones), and `gcd.sweep.sweeper.run_round` against
`l0lab.testing.memory.MemoryObjectStore`.
Only the environment is simulated: writers with stale epoch caches and multi-partition
objects, partition logs and their reconcilers, partition creation and deletion,
leadership changes, the epoch ticker, and the faults (`l0lab.sim.faults`).

How
---
One `random.Random(seed)` decides everything; time is virtual (`l0lab.sim.vtime`): the
event loop's clock and every injected clock are the same `VirtualClock`, and the loop
never sleeps. Each step moves time by 1 s and performs one action; long operations
(held fences, waiting slides, sweeper rounds) are tasks spanning steps. Same seed, same
run: the digest of the event trace is identical. The simulator keeps its own ground
truth (`l0lab.sim.checks.Ledger`) and checks safety after every event and step, and
liveness after a quiescent tail (`l0lab.sim.checks`).

The undo window
---------------
`l0lab.sim.undo` plays a smaller world of its own: the real sweeper with `--undo-window`
on a versioned in-memory bucket, a partition publishing a wrong M(p), and the runbook's
pause, restore, repair, resume in the middle of the run (nothing lost; nothing restored
deleted again while paused; every garbage version reclaimed after the window).

Variants
--------
`l0lab.sim.variants` holds deliberately broken variants, each caught within a few seeds
(see tests/l0lab/sim/test_variants.py); `correct` is the real code.

Bugs it found in l0gc (fixed; the seeds below reproduced them)
-------------------------------------------------------------
1. Safety, `PartitionGcState` vs the fence: a slide of the applied window promised
   "no later entry is below the previous maximum", but the fence can skip an epoch
   (``[4] + 6 -> [4, 6]``) and admit it later as INSIDE; the log applied 5 then 6, the
   applied window became ``[5, 6]``, M(p) reached 4 while a writer still held an
   admitted fence at epoch 4. Fixed: each entry carries the fence's lower bound at
   commit time (``admitted_from``), which is the promise (`watermark.core.gcstate`).
2. Liveness, the publisher's housekeeping entries took log offsets the writer's log
   did not have; the offset mapping was not persisted, so after a failover reconciled
   reports mapped below the last housekeeping entry forever and the partition pinned
   the global M. Fixed: an idle advance uses no offset (`advance_idle`).
3. Safety, a publisher crash or failover with applied but unpublished commits: the
   new owner restored the last published snapshot, took the partition for idle and
   reconciled, and idle-advanced M(p) past the unpublished entries' epochs. Fixed:
   adoption takes the log's end offset (`catch_up`), and without it a partition gets
   no idle advance until its first commit.

May import: `watermark` and `gcd` (not `gcd.cli`), and `l0lab.testing`.
"""
