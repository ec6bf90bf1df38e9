"""The sweep engine: rounds that list epoch-stamped keys and delete those at or below M.

`sweeper` (one round: admit, detect, run, report), `listing` (a round's LIST streams, one
page ahead), `pages` (deciding a listed page), `roundstate` (a round's shared state),
`findings` (what a round found about its store), `deleter` (batched deletes), `brake`
(the deletion brake), `safety` (the one admission path), `shards` (which sweeper owns
which prefixes), `binding` and `claims` (the namespace's binding to its storage),
`nesting` (claims found below the root), `usage` (what rounds cost and freed).

May import: the kernel (`l0gc`), `gcd.rules`, `gcd.storage`, `gcd.observe`,
`gcd.journal`, `gcd.undo`.
"""
