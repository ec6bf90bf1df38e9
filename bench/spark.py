"""The Spark pipeline benchmark (`bench.spark_inventory`, owned by the Spark work), wrapped.

`bench.spark_inventory` is a script of its own (1,000,000-row S3 Inventory, `gcd
spark-report` and `gcd spark-sweep --dry-run` rows/s on local[2]); this module runs it
in a subprocess and turns its JSON into a `Report`, so that `python -m bench --only
spark` runs it beside the others. If the script is absent, the report says so.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.common import PYTHON, REPO, Goal, Report, Scale, Table, child_env, run_child

NAME = "spark"
TITLE = "6. Spark pipeline on an S3 Inventory report (local[2])"
_ROWS = {Scale.TOY: 5_000, Scale.QUICK: 100_000, Scale.FULL: 1_000_000}
SCRIPT = REPO / "bench" / "spark_inventory.py"


def run(scale: Scale = Scale.FULL, runs: int = 3) -> Report:
    """Run `bench.spark_inventory` (if present) and report its figures."""
    report = Report(NAME, TITLE, scale, runs)
    if not Path(SCRIPT).exists():
        report.notes.append(f"{SCRIPT.relative_to(REPO)} is not there yet: nothing measured.")
        return report
    rows = _ROWS[scale]
    done = run_child(
        [PYTHON, "-m", "bench.spark_inventory", "--rows", str(rows), "--runs", str(runs)],
        env=child_env(SPARK_LOCAL_IP="127.0.0.1"),
        timeout_s=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench.spark_inventory failed: {done.stderr[-3000:]}")
    document = json.loads(done.stdout[done.stdout.index("{") :])
    results = document["results"]
    table_rows = tuple(
        (
            name,
            figures["median_s"],
            figures["rows_per_s"],
            ", ".join(str(s) for s in figures["runs_s"]),
        )
        for name, figures in results.items()
    )
    report.tables.append(
        Table(
            f"{document['rows']:,} inventory rows in {document['data_files']} CSV.gz files, "
            f"master {document['master']} (session start {document['session_start_s']} s and "
            f"data generation {document['generate_s']} s not included)",
            ("command", "seconds (median)", "rows/s", "runs, s"),
            table_rows,
        )
    )
    report.goals.append(
        Goal(
            "recorded (the issue sets no target for Spark)",
            ", ".join(f"{k}: {v['rows_per_s']:,} rows/s" for k, v in results.items()),
            "n/a",
            True,
        )
    )
    report.notes.append(
        "Measured by bench/spark_inventory.py (not this harness's code); "
        "see its docstring for the data set."
    )
    report.raw["document"] = document
    return report
