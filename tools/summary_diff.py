"""Row-by-row difference of two report summaries (``summary.json`` written by ``python -m figures report``).

Usage (from the repository root)::

    python tools/summary_diff.py OLD/summary.json NEW/summary.json [--json]

A row is identified by its figure, its kind (``gap`` or ``check``), its name and its time (gap rows at several times
share a name). The tool prints the status counts before and after, then every row added, removed or whose status
changed (with the explanation's cause where the new status carries one), and the figures added or removed. With
``--json`` it prints the same content as one JSON object instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: The row statuses in the report's order (rows with another status are still compared, counted after these).
STATUS_ORDER = ("holds", "consistent", "explained", "disagrees", "deferred", "fails")


def row_key(row: dict) -> tuple:
    """The identity of a summary row: (figure, kind, name, time)."""
    return (row.get("figure"), row.get("kind"), row.get("name"), row.get("time"))


def _key_text(key: tuple) -> str:
    figure, kind, name, time = key
    at = "" if time is None else f" @ t={time:g}"
    return f"{figure} [{kind}] {name}{at}"


def load_summary(path: str | Path) -> dict:
    """Read one ``summary.json``; a clear error when it is not a report summary."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"summary: cannot read {path} as JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError(f"summary: {path} has no 'rows' list; expected a report's summary.json")
    return data


def _counts(rows: list[dict]) -> dict[str, int]:
    out = {s: 0 for s in STATUS_ORDER}
    for r in rows:
        out[r.get("status")] = out.get(r.get("status"), 0) + 1
    return out


def _cause(row: dict) -> str | None:
    why = row.get("explanation")
    if isinstance(why, dict):
        return why.get("reason")
    return None


def _index(rows: list[dict], label: str) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    for r in rows:
        key = row_key(r)
        if key in out:
            raise ValueError(f"summary: {label} has two rows named {_key_text(key)}")
        out[key] = r
    return out


def diff_summaries(old: dict, new: dict) -> dict:
    """Compare two summaries row by row.

    Parameters
    ----------
    old, new : dict
        The parsed ``summary.json`` files (each with a ``rows`` list).

    Returns
    -------
    dict
        ``counts_before`` and ``counts_after`` (rows per status), ``added`` and ``removed`` (row records: key text,
        status), ``changed`` (key text, status before and after, the new row's cause if any), and
        ``figures_added`` / ``figures_removed`` (figure names).
    """
    before, after = _index(old["rows"], "old"), _index(new["rows"], "new")
    added = [{"row": _key_text(k), "status": after[k].get("status")} for k in after if k not in before]
    removed = [{"row": _key_text(k), "status": before[k].get("status")} for k in before if k not in after]
    changed = [
        {
            "row": _key_text(k),
            "before": before[k].get("status"),
            "after": after[k].get("status"),
            "cause": _cause(after[k]),
        }
        for k in after
        if k in before and before[k].get("status") != after[k].get("status")
    ]
    figs_old = {f.get("figure") for f in old.get("figures", [])}
    figs_new = {f.get("figure") for f in new.get("figures", [])}
    return {
        "counts_before": _counts(old["rows"]),
        "counts_after": _counts(new["rows"]),
        "added": added,
        "removed": removed,
        "changed": changed,
        "figures_added": sorted(figs_new - figs_old),
        "figures_removed": sorted(figs_old - figs_new),
    }


def format_diff(diff: dict) -> str:
    """The difference as plain text: a counts table, then the added, removed and changed rows."""
    statuses = list(dict.fromkeys([*diff["counts_before"], *diff["counts_after"]]))
    lines = [f"{'status':<12}{'before':>8}{'after':>8}{'change':>8}"]
    for s in statuses:
        b, a = diff["counts_before"].get(s, 0), diff["counts_after"].get(s, 0)
        lines.append(f"{s:<12}{b:>8}{a:>8}{a - b:>+8}")
    total_b, total_a = sum(diff["counts_before"].values()), sum(diff["counts_after"].values())
    lines.append(f"{'rows':<12}{total_b:>8}{total_a:>8}{total_a - total_b:>+8}")
    for title, key in (("figures added", "figures_added"), ("figures removed", "figures_removed")):
        if diff[key]:
            lines += ["", f"{title} ({len(diff[key])}):", *(f"  {name}" for name in diff[key])]
    for title, key in (("rows added", "added"), ("rows removed", "removed")):
        if diff[key]:
            lines += ["", f"{title} ({len(diff[key])}):", *(f"  {r['status']:<11} {r['row']}" for r in diff[key])]
    if diff["changed"]:
        lines += ["", f"status changed ({len(diff['changed'])}):"]
        for r in diff["changed"]:
            cause = f"  -- {r['cause']}" if r["cause"] else ""
            lines.append(f"  {r['before']} -> {r['after']}: {r['row']}{cause}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="the earlier summary.json")
    parser.add_argument("new", help="the later summary.json")
    parser.add_argument("--json", action="store_true", help="print the difference as JSON")
    args = parser.parse_args(argv)
    try:
        diff = diff_summaries(load_summary(args.old), load_summary(args.new))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(json.dumps(diff, indent=1) if args.json else format_diff(diff))
    return 0


if __name__ == "__main__":
    sys.exit(main())
