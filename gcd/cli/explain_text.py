"""`gcd explain`'s answers for people: a block per key (also `gcd status --why`'s)."""

from __future__ import annotations

from typing import Any

from gcd.cli.output import human_age, utc_text
from gcd.explainer.answer import ExplainReport
from l0gc.display import printable

__all__ = ["render_text"]


def _when(at: float | None) -> str:
    return utc_text(at) or "unknown"


def _reconciler(p: dict[str, Any]) -> str:
    behind = p.get("reconciler_behind")
    if behind is None:
        return "reconciler unknown"
    if behind:
        return f"reconciler BEHIND ({p.get('unreconciled')} entries not lifted)"
    return "reconciler caught up"


def _detail(doc: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for p in doc.get("waiting_on", ()):
        owner = "-" if p["owner"] is None else printable(p["owner"])
        lines.append(
            f"  waiting on {printable(p['partition'])}  M(p) {p['watermark']}  "
            f"owner {owner}  updated {human_age(p['age_s'])}  {_reconciler(p)}"
        )
    if doc.get("waiting_on_more"):
        lines.append(f"  ...        and {doc['waiting_on_more']} more partitions")
    if doc.get("epoch_open"):
        lines.append(
            f"  epoch      {doc['epoch']} is not closed yet (cluster epoch {doc['cluster_epoch']})"
        )
    estimate = doc.get("estimate")
    if estimate is not None:
        if estimate["at"] is None:
            lines.append(f"  estimate   {printable(estimate['basis'])}")
        else:
            lines.append(
                f"  estimate   deletable around {_when(estimate['at'])} (an estimate, "
                f"{printable(estimate['basis'])})"
            )
    if doc["reason"] == "grace_period":
        lines.append(
            f"  written    {_when(doc['last_modified'])}; the grace period ends "
            f"{_when(doc['grace_ends'])}"
        )
    if doc["reason"] == "object_lock":
        lines.append(
            f"  locked     {printable(str(doc['lock']))} until {_when(doc['retain_until'])}"
        )
    deleted = doc.get("deleted")
    if deleted is not None:
        versions = ", ".join(map(printable, deleted["version_ids"])) or "-"
        how = f"etcd revision {deleted['revision']}"
        lines.append(
            f"  deleted    {_when(deleted['at'])} by sweeper "
            f"{printable(deleted['sweeper'])}, request {deleted['request']}, epoch "
            f"{deleted['epoch']} <= M {deleted['safe_epoch']} (cluster epoch "
            f"{deleted['cluster_epoch']}, {how}); versions {versions}"
        )
        lines.append(f"  record     {printable(deleted['source'])}")
    searched = doc.get("journal_searched")
    if doc["verdict"] == "absent":
        if searched is None or searched["source"] is None:
            lines.append("  journal    not searched: give --journal-dir or --journal-prefix")
        else:
            count = len(searched["segments"]) + searched["segments_more"]
            lines.append(
                f"  journal    searched {count} of {searched['segments_total']} "
                f"segments in {printable(searched['source'])} (the others cannot "
                "hold it)"
            )
    return lines


def render_text(report: ExplainReport) -> str:
    """The report for people: a block per key."""
    out: list[str] = []
    for answer in report.explanations:
        doc = answer.to_dict()
        out.append(f"{printable(answer.key)}: {answer.verdict.value.upper()}")
        out.append(f"  why        {printable(answer.summary)}")
        out.extend(_detail(doc))
    return "\n".join(out) + "\n"
