"""Deterministic simulation of the whole l0gc system, with faults, in virtual time.

Why
---
l0gc deletes data. Unit tests check each rule; this checks that the rules together
keep every object that is still needed, under the interleavings and failures a real
deployment sees, and that garbage does get collected once things calm down.

What runs
---------
The real code: `watermark.publisher.Publisher` (hosting `PartitionGcState` and the
`FencingGuard` per partition), `watermark.clock.EpochClock` and `stamp_epoch` for
writers, `watermark.store.WatermarkStore` on `watermark.memory_kv.MemoryKV` (so the
ownership fencing, monotonic M(p), registration and `compute_safe_epoch` are the
production ones), and `gcd.sweeper.run_round` against `gcd.objectstore.MemoryObjectStore`.
Only the environment is simulated: writers with stale epoch caches and multi-partition
objects, partition logs and their reconcilers, partition creation and deletion,
leadership changes, the epoch ticker, and the faults (`gcd.sim.faults`).

How
---
One `random.Random(seed)` decides everything; time is virtual (`gcd.sim.vtime`): the
event loop's clock and every injected clock are the same `VirtualClock`, and the loop
never sleeps. Each step moves time by 1 s and performs one action; long operations
(held fences, waiting slides, sweeper rounds) are tasks spanning steps. Same seed, same
run: the digest of the event trace is identical. The simulator keeps its own ground
truth (`gcd.sim.checks.Ledger`) and checks safety after every event and step, and
liveness after a quiescent tail (`gcd.sim.checks`).

Variants
--------
`gcd.sim.variants` holds deliberately broken variants (each caught within a few seeds;
see tests/gcd/sim/test_variants.py) and, as `patched`, the real code plus the fixes
proposed below.

Bugs found in the real code (reproduce with the commands shown)
-------------------------------------------------------------
1. Safety, `PartitionGcState` vs the fence: a slide of the applied window promises
   "no later entry is below previous_applied", but the fence can skip an epoch
   (``[4] + 6 -> [4, 6]``) and admit it later as INSIDE; the log applies 5 then 6,
   the applied window becomes ``[5, 6]``, M(p) reaches 4 while a writer still holds
   an admitted fence at epoch 4, and its commit then raises `FencingViolation`.
   ``gcd simulate --seed 92 --steps 300``. Proposed fix (`FenceBoundGcState`): clamp
   each slide's promise to the fence window's oldest_accepted at commit time (the
   publisher knows it; slides drain, so no later entry can be below it).
2. Liveness, `Publisher` offset mapping: `offset_shift` / `last_writer_offset` are not
   in the record, so a new owner maps reconciled reports below its last housekeeping
   entry forever: the partition never counts as idle and pins the global M.
   ``gcd simulate --seed 29 --steps 300``. Proposed fix: persist the mapping with
   the record and restore it on adoption (emulated by `SimPublisher`).
3. Safety, publisher crash or failover with unpublished commits: the new owner
   restores the last published snapshot, never learns of the entries committed since,
   treats the partition as idle and reconciled, and idle-advances M(p) past their
   epochs. ``gcd simulate --seed 12 --steps 600 --variant patched --lossy-failover``.
   Needs a protocol decision (e.g. adopt with the writer log's end offset and do not
   advance past it until the reconciler has), so by default the simulator moves
   ownership only when the record holds every applied entry.
"""

from gcd.sim.checks import SAFETY, Checker, Ledger, Violation, ViolationKind
from gcd.sim.runner import REPORT_VERSION, Report, SeedResult, run_seed, run_seeds
from gcd.sim.variants import BROKEN, CORRECT, PATCHED, VARIANTS, Variant
from gcd.sim.world import SimConfig

__all__ = [
    "BROKEN",
    "CORRECT",
    "DEFAULT_STEPS",
    "PATCHED",
    "REPORT_VERSION",
    "SAFETY",
    "VARIANTS",
    "Checker",
    "Ledger",
    "Report",
    "SeedResult",
    "SimConfig",
    "Variant",
    "Violation",
    "ViolationKind",
    "run_seed",
    "run_seeds",
]

DEFAULT_STEPS = 1000
"""Steps of the faulty phase per seed in CI and by default in `gcd simulate`."""
