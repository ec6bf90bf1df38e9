"""The sweeper: rounds that list epoch-stamped keys and delete those at or below M.

Lives here: `sweeper` (one round: admit, detect, run, report), `listing` (a round's
LIST streams, one page ahead), `pages` (deciding a listed page), `roundstate` (a round's
shared state), `findings` (what a round found about its store), `deleter` (batched
deletes), `brake` (the deletion brake), `safety` (the one admission path: read M, then
the rule `gcd.rules.admission`), `daemon` (rounds forever), `shards` (which sweeper owns
which prefixes), `binding` (checking the namespace's binding to its storage), `journal`
and `journal_check` (the deletion journal and its verification), `events` (the records
the deleter's sinks get), `telemetry` (the events the engine emits for instrumentation),
`report` and `metrics` (the hook that turns those events into Prometheus series), and
`runtime` (a sweep assembled on one etcd client: store, watermark source, shard
announcement, journal; one round or forever).

May import: the kernel (`l0gc`), `gcd.rules`,
`gcd.storage`.
"""
