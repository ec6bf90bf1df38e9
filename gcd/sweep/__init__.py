"""The sweeper: rounds that list epoch-stamped keys and delete those at or below M.

Lives here: `sweeper` (one round: list, decide, delete), `deleter` (batched deletes),
`brake` (the deletion brake), `safety` (the one admission path: read M, then the rule
`gcd.rules.admission`), `daemon` (rounds forever), `shards` (which sweeper owns which
prefixes), `binding` (checking the namespace's binding to its storage), `journal` and
`journal_check` (the deletion journal and its verification), `events`, `report` and
`metrics`, and `runtime` (a sweep assembled on one etcd client: store, watermark source,
shard announcement, journal; one round or forever).

May import: `watermark` (below its API), `gcd.errors`, `gcd.rules`,
`gcd.storage`.
"""
