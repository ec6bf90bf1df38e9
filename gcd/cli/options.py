"""The option tables of the gcd commands; the option system itself is `l0gc.options`.

Design notes: docs/internals/cli.md, `gcd.cli.options`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from gcd.rules.layout import DEFAULT_ROOT, KeyLayout
from gcd.storage.registry import store_from_url
from l0gc import options as _options
from l0gc.etcd.settings import ETCD_OPTIONS
from l0gc.logs import LEVEL_NAMES
from l0gc.options import (
    Option,
    boolean,
    choice,
    duration,
    integer,
    positive_duration,
    positive_number,
    text,
    whole_seconds,
)

__all__ = [
    "DAEMON_OPTIONS",
    "JOURNAL_OPTIONS",
    "JOURNAL_READ_OPTIONS",
    "LAYOUT_OPTIONS",
    "PRICE_OPTIONS",
    "ROUND_OPTIONS",
    "S3_OPTIONS",
    "SWEEP_OPTIONS",
    "load_config",
    "resolve",
]

S3_OPTIONS: tuple[Option, ...] = (
    Option(
        "--store",
        text,
        None,
        "the store and root as one URL: s3://BUCKET/ROOT, az://ACCOUNT/CONTAINER/ROOT or "
        "gs://BUCKET/ROOT (instead of --storage, --bucket, --container, --account-url, --root)",
        "URL",
    ),
    Option("--bucket", text, None, "bucket holding the L0 objects (required)", "NAME"),
    Option(
        "--endpoint-url",
        text,
        None,
        "S3 endpoint URL for S3-compatible stores (default: AWS for the region)",
        "URL",
    ),
    Option("--region", text, None, "S3 region (default: from the AWS config chain)", "REGION"),
)
QUIET_LOG_LEVEL = Option(
    "--log-level",
    text,
    "warning",
    "debug, info, warning or error (default warning)",
    "LEVEL",
    values=LEVEL_NAMES,
)
"""--log-level of the commands that only read and report (status, journal, namespace...)."""
LAYOUT_OPTIONS: tuple[Option, ...] = (
    Option(
        "--root",
        text,
        DEFAULT_ROOT,
        f"key root of the L0 objects (default {DEFAULT_ROOT})",
        "PREFIX",
    ),
    Option(
        "--layout",
        text,
        "default",
        "named key layout (default 'default': {root}/{prefix:03d}/{epoch:018d}/{name})",
        "NAME",
    ),
    Option(
        "--key-pattern",
        text,
        None,
        "custom layout: regex over the key after {root}/ with a named group 'epoch' "
        "(optional 'prefix', 'name'); overrides --layout",
        "REGEX",
    ),
    Option(
        "--key-template",
        text,
        None,
        "with --key-pattern (required): how the writer formats the key after {root}/, "
        "e.g. '{prefix:03d}/{epoch:018d}/{name}'; a key is deleted only if this gives it "
        "back exactly",
        "TEMPLATE",
    ),
    Option(
        "--epoch-width",
        integer(1),
        None,
        "with --key-pattern: epochs are zero padded to this many digits (enables "
        "skipping ahead in listings); omit when not padded",
        "DIGITS",
    ),
)
ROUND_OPTIONS: tuple[Option, ...] = (
    Option(
        "--safe-epoch",
        integer(-1),
        None,
        "operator override of M; still checked against the cluster epoch when etcd is "
        "configured; without etcd, the only source of M (default: M from etcd)",
        "N",
    ),
    Option(
        "--grace",
        duration,
        600.0,
        "only delete objects whose LastModified is older than this (default 10m)",
        "DURATION",
    ),
    Option(
        "--batch-size",
        integer(1),
        1000,
        "keys per DeleteObjects request, 1-1000 (default 1000)",
        "N",
    ),
    Option(
        "--concurrency",
        integer(1),
        8,
        "DeleteObjects requests in flight at most (default 8; halved on SlowDown)",
        "N",
    ),
    Option(
        "--list-concurrency",
        integer(1),
        4,
        "most LIST streams at once (default 4; a round starts with one and adds one "
        "while the deleters wait on the listing and more streams list faster; 1 lists "
        "the root as one stream)",
        "N",
    ),
    Option(
        "--max-deletes-per-second",
        positive_number,
        None,
        "token-bucket limit on deleted keys per second (default: unlimited)",
        "RATE",
    ),
    Option(
        "--max-deletes",
        integer(1),
        None,
        "delete at most N objects per round (default: unlimited)",
        "N",
    ),
    Option(
        "--full-listing",
        boolean,
        False,
        "list every key instead of skipping the rest "
        "of a prefix past M (slower; for comparison and audits)",
        switch=True,
    ),
    Option(
        "--versions",
        choice("reclaim", "markers-only"),
        "reclaim",
        "on a versioned bucket: 'reclaim' deletes every version and delete marker of an "
        "eligible key by version id (bytes freed); 'markers-only' deletes current keys "
        "only, leaving a delete marker and every old version billed (default reclaim; "
        "docs/stores.md)",
        "MODE",
    ),
    Option(
        "--listing",
        choice("ordered", "unordered"),
        "ordered",
        "'unordered' for a store whose listings are not in key order or that refuses "
        "StartAfter: listed in full, no skip-ahead (S3 Express directory buckets, names "
        "ending --x-s3, are detected; default ordered; docs/stores.md)",
        "ORDER",
    ),
    Option("--shard-index", integer(0), 0, "this sweeper's shard, 0..shard-count-1", "I"),
    Option("--shard-count", integer(1), 1, "number of sweepers splitting prefixes 000-999", "N"),
    Option(
        "--shard-ttl",
        whole_seconds(1),
        15,
        "lease of this sweeper's shard announcement: a sweeper killed without a clean "
        "stop is still announced this long, so its restart waits that long before "
        "deleting (default 15s)",
        "DURATION",
    ),
    Option(
        "--round-deadline",
        duration,
        1800.0,
        "a round stops listing this long after it started, whatever the store does "
        "(listers still waiting are cancelled, batches already cut are deleted; the round "
        "counts one error and says deadline_exceeded; default 30m)",
        "DURATION",
    ),
    Option(
        "--request-deadline",
        duration,
        120.0,
        "total time one LIST or DeleteObjects request may take, its whole answer read "
        "(a store dripping its answer restarts the 60s read timeout with every byte, not "
        "this; default 2m)",
        "DURATION",
    ),
    Option(
        "--undo-window",
        duration,
        0.0,
        "after l0gc deletes an object it can be brought back this long (`gcd restore`): "
        "on a versioned bucket keys are hidden behind a delete marker and their versions "
        "freed one window later; elsewhere only what was garbage for the whole window "
        "is deleted. Needs --journal-dir. 0 (the default): deletions are final",
        "DURATION",
    ),
    Option(
        "--max-pages-per-prefix",
        integer(1),
        100_000,
        "pages one listing range may take before it is taken for a broken store, named "
        "and skipped (one error; a continuation token given twice is caught at once; "
        "default 100000)",
        "N",
    ),
    dataclasses.replace(
        QUIET_LOG_LEVEL,
        default=None,
        help="debug, info, warning or error (default: warning "
        "when stderr is a terminal, so the progress line stays intact; info otherwise)",
    ),
)
DAEMON_OPTIONS: tuple[Option, ...] = (
    Option(
        "--interval",
        duration,
        10.0,
        "pause between rounds that made progress, and "
        "the least time between rounds started because M advanced (default 10s)",
        "DURATION",
    ),
    Option(
        "--idle-interval",
        duration,
        60.0,
        "longest pause when nothing was deletable, while blocked, or after an error "
        "(doubles on consecutive errors); M advancing, `gcd resume` or an unblocked "
        "namespace end it within 2s (default 60s)",
        "DURATION",
    ),
    Option("--max-interval", duration, 600.0, "cap of the error backoff (default 10m)", "DURATION"),
    Option(
        "--full-pass-interval",
        duration,
        600.0,
        "list everything at least this often even if M did not move (default 10m)",
        "DURATION",
    ),
    Option(
        "--http-host",
        text,
        "0.0.0.0",  # noqa: S104 - a daemon serves its probes to the cluster
        "address of /metrics /healthz /readyz (default 0.0.0.0)",
        "HOST",
    ),
    Option(
        "--http-port",
        integer(0),
        9464,
        "port of /metrics /healthz /readyz, "
        "/v1/explain and /plot.svg (default 9464; 0 picks a free port)",
        "PORT",
    ),
    Option(
        "--auth-token-file",
        text,
        None,
        "tokens (ROLE:TOKEN lines, as `watermark serve` reads them) that GET /v1/explain "
        "and /plot.svg require, any role; without it they answer on a loopback "
        "--http-host only (default: none)",
        "PATH",
    ),
    Option(
        "--unready-after",
        duration,
        300.0,
        "/readyz fails when etcd was unreachable this long (default 5m)",
        "DURATION",
    ),
    Option(
        "--stale-after",
        duration,
        2400.0,
        "/readyz fails (and l0gc_sweeper_seconds_since_last_round grows past it) when no "
        "round has completed for this long, or a higher M read from etcd has waited this "
        "long for a round to apply it (default 40m: the 30m round deadline plus 10m)",
        "DURATION",
    ),
    Option(
        "--verify-m-every",
        integer(0),
        30,
        "follow the namespace with an etcd watch after one full read, and check the "
        "followed view every this many reads (rounds and the looks every 2s between "
        "them), at most once per this many --intervals: by keys and revisions, every "
        "30th check against a full read (a mismatch blocks that round); 0 reads every "
        "partition record every time, and looks between rounds only every --interval "
        "(default 30)",
        "ROUNDS",
    ),
)
SWEEP_OPTIONS: tuple[Option, ...] = (
    Option(
        "--dry-run", boolean, False, "delete nothing; report what would be deleted", switch=True
    ),
    Option(
        "--plan-out",
        text,
        None,
        "write the keys selected for deletion as JSON lines (key, epoch, size, last_modified)",
        "FILE",
    ),
    Option("--json", boolean, False, "print the round summary as JSON on stdout", switch=True),
    Option(
        "--paused-ok",
        boolean,
        False,
        "exit 0, not 3, when GC is paused (`gcd pause`); "
        "every other block still exits 3 (for scheduled runs: a pause is no failure)",
        switch=True,
    ),
)
JOURNAL_OPTIONS: tuple[Option, ...] = (
    Option(
        "--journal-dir",
        text,
        None,
        "deletion journal: append a record of why each DeleteObjects request is safe, "
        "and of its outcome, to rotated JSON-lines segments in this directory (default: "
        "no journal)",
        "DIR",
    ),
    Option(
        "--journal-prefix",
        text,
        None,
        "also upload each closed journal segment to this prefix of the bucket, which must "
        "lie outside --root (needs --journal-dir; default: local segments only)",
        "PREFIX",
    ),
    Option(
        "--journal-max-bytes",
        integer(1024),
        64 * 1024 * 1024,
        "start a new journal segment past this size in bytes (default 64 MiB)",
        "BYTES",
    ),
    Option(
        "--journal-max-age",
        duration,
        3600.0,
        "start a new journal segment after this long (default 1h)",
        "DURATION",
    ),
    Option(
        "--journal-keep-local",
        boolean,
        False,
        "keep the local journal segments after they are shipped to --journal-prefix "
        "(default: a segment is deleted locally once its uploaded copy is read back "
        "identical, so the journal directory holds about one segment)",
        switch=True,
    ),
    Option(
        "--journal-retention",
        positive_duration,
        None,
        "delete shipped segments under --journal-prefix, and the etcd journal anchors, "
        "older than this (e.g. 30d), at most once an hour; the chain goes on from a "
        "pruned marker (default: kept forever)",
        "DURATION",
    ),
)
JOURNAL_READ_OPTIONS: tuple[Option, ...] = (
    Option(
        "--journal-dir",
        text,
        None,
        "read the journal segments in this directory (several: comma-separated), the "
        "sweepers' --journal-dir",
        "DIR",
    ),
    Option(
        "--journal-prefix",
        text,
        None,
        "read the journal segments the sweepers shipped to this prefix of the bucket "
        "(their --journal-prefix); with --journal-dir both are read and merged, as "
        "sweepers that ship delete their local copies",
        "PREFIX",
    ),
)
"""The journal flags of the commands that read it (`gcd journal`, `gcd restore`)."""


def _dollars(value: object) -> float:
    """A price in dollars: a finite number >= 0."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError("expected a price in dollars, a number >= 0") from None
    if isinstance(value, bool) or not math.isfinite(number) or number < 0:
        raise ValueError("expected a price in dollars, a number >= 0")
    return number


PRICE_OPTIONS: tuple[Option, ...] = (
    Option(
        "--price-list",
        _dollars,
        None,
        "dollars per 1,000 LIST requests (default: the "
        "store's list price, gcd.rules.prices; docs/stores.md#what-gc-costs)",
        "USD",
    ),
    Option(
        "--price-delete",
        _dollars,
        None,
        "dollars per 1,000 DeleteObjects requests "
        "(default: the store's; free on S3, GCS and Azure)",
        "USD",
    ),
    Option(
        "--price-storage",
        _dollars,
        None,
        "dollars per GiB-month stored (default: the store's standard/hot tier)",
        "USD",
    ),
)
_TABLES = (
    S3_OPTIONS,
    LAYOUT_OPTIONS,
    ROUND_OPTIONS,
    DAEMON_OPTIONS,
    SWEEP_OPTIONS,
    JOURNAL_OPTIONS,
    PRICE_OPTIONS,
)
# Keys of the Spark commands (gcd/cli/spark.py, kept there so `gcd sweep` never imports
# the Spark modules): one config file may serve every gcd command.
SPARK_ONLY_KEYS = frozenset(
    {
        "inventory",
        "inventory_root",
        "list",
        "list_tasks",
        "output",
        "decisions_uri",
        "master",
        "delete_concurrency",
        "price_per_gb_month",
        "conf",
        "py_files",
        "delete_tasks",
    }
)
# Keys of the options the other commands declare in their own modules (status, pause,
# resume, journal, namespace, and the Azure storage options), which import this one.
OTHER_COMMAND_KEYS = frozenset(
    {
        "all",
        "json",
        "log_level",
        "replace",
        "reason",
        "key",
        "force",
        "storage",
        "account_url",
        "container",
        "azure_connection_string_file",
        "gcs_credentials_file",
        "gcs_anonymous",
        "since",
        "until",
        "round",
        "partition",
        "why",
        "from_file",
    }
)
_UNIVERSE = (
    {o.dest for table in _TABLES for o in table}
    | {o.dest for o in ETCD_OPTIONS}
    | SPARK_ONLY_KEYS
    | OTHER_COMMAND_KEYS
)


def layout_from_args(args: argparse.Namespace) -> KeyLayout:
    """The key layout chosen by --layout, --key-pattern, --key-template, --root (or the
    root of --store), --epoch-width."""
    url = getattr(args, "store", None)
    if url is not None:
        _, root = store_from_url(url)
        args.root = root or args.root
    if args.layout != "default" and args.key_pattern is None:
        spec = args.layout
    else:
        spec = args.key_pattern if args.key_pattern is not None else "default"
    return KeyLayout.from_spec(
        spec, args.root, epoch_width=args.epoch_width, template=args.key_template
    )


def load_config(path: str | None, known: Iterable[str] = ()) -> dict[str, Any]:
    """The config file's keys; ConfigError when unreadable, not TOML, or a key no gcd
    command (nor `known`) takes."""
    return _options.load_config(path, _UNIVERSE | set(known))


def resolve(
    ns: argparse.Namespace,
    options: Iterable[Option],
    *,
    environ: Mapping[str, str] | None = None,
    extra_known: Iterable[str] = (),
) -> None:
    """Replace each option's value in `ns` by flag > env > config > default, validated.

    The etcd options are resolved too when the command has them (its parser had
    `add_etcd_arguments`); their defaults stay None, for `EtcdSettings.from_args`.
    """
    etcd = tuple(o for o in ETCD_OPTIONS if hasattr(ns, o.dest))
    _options.resolve(ns, (*options, *etcd), environ=environ, known=_UNIVERSE | set(extra_known))
