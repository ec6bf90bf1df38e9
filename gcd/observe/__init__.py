"""What the sweepers report, and to whom: the vocabulary every part below the commands uses.

`events` (the records the deleter's sinks get), `telemetry` (the events the engine emits
for instrumentation), `report` (a round's summary and dry-run plan), `metrics` (the
Prometheus series fed by those events), `trail` (M over the last hours, for the picture).

May import: the kernel (`l0gc`), `gcd.rules`, `gcd.storage`.
"""
