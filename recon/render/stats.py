"""`recon stats` and `recon psp status` for people: the stats document (recon.overview) as tables and lines
(printed through ``recon.render.output``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recon.payments.money import format_amount
from recon.render.output import FoldTable, age_text, stdout_console


def stats_table(doc: dict[str, Any]) -> None:
    console = stdout_console()
    states = ["pending", "runnable", "retryable", "leased", "succeeded", "dead", "canceled"]
    table = FoldTable(title=f"queues at {doc['at']}")
    table.add_column("queue")
    for s in states:
        table.add_column(s, justify="right")
    table.add_column("oldest runnable", justify="right")
    for queue, entry in sorted(doc["queues"].items()):
        age = entry["oldest_runnable_age_seconds"]
        table.add_row(queue, *(str(entry["depth"].get(s, 0)) for s in states),
                      f"{age:.1f}s" if age is not None else "-")
    console.print(table)
    window = int(doc["window_seconds"])
    console.print(f"last {window}s: attempts {doc['attempts'] or '{}'}; lease expirations "
                  f"{doc['lease_expirations']}; retry rate {doc['retry_rate']:.2%}; dead rate {doc['dead_rate']:.2%}")


def pool_tables(doc: dict[str, Any]) -> None:
    """The parts of `recon stats` beyond queue depth: kinds, depth detail, workers, PSPs, money at risk."""
    console = stdout_console()
    kinds = FoldTable(title=f"job kinds, last {int(doc['window_seconds'])}s")
    for col in ("kind", "attempts", "retry rate", "dead rate", "attempts/success", "p50 s", "p95 s", "max s"):
        kinds.add_column(col, justify="left" if col == "kind" else "right")
    for kind, e in sorted(doc["kinds"].items()):
        d = e["duration_seconds"] or {}
        kinds.add_row(kind, str(sum(e["attempts"].values())), f"{e['retry_rate']:.2%}",
                      f"{e['dead_rate']:.2%}", _num(e["attempts_per_success"]), _num(d.get("p50")),
                      _num(d.get("p95")), _num(d.get("max")))
    console.print(kinds)
    if doc["depth_detail"]:
        depth = FoldTable(title="unfinished jobs by queue, kind, tenant, priority")
        for col in ("queue", "kind", "tenant", "priority", "state", "jobs"):
            depth.add_column(col, justify="right" if col in ("priority", "jobs") else "left")
        for row in doc["depth_detail"][:50]:
            depth.add_row(row["queue"], row["kind"], row["tenant"] or "-", str(row["priority"]), row["state"],
                          str(row["jobs"]))
        console.print(depth)
    w = doc["workers"]
    console.print(f"workers: {w['live']} live, utilisation {w['utilisation']:.0%} "
                  f"({w['busy_slots']}/{w['slots']} slots); stale finishes {doc['stale_finishes']}, "
                  f"leases lost {doc['leases_lost']}")
    if w["list"]:
        workers = FoldTable(title="workers")
        for col in ("id", "status", "queues", "busy/slots", "claims/prefetch", "sized by", "last seen", "claimed",
                    "stale finishes"):
            workers.add_column(col)
        for r in w["list"]:
            sizing = r.get("sizing")
            workers.add_row(r["id"], r["status"], ",".join(r["queues"]), f"{r['busy_slots']}/{r['slots']}",
                            f"{sizing['claim_batch']}/{sizing['prefetch']}" if sizing else "-",
                            sizing["reason"] if sizing else "-",
                            f"{r['last_seen_seconds_ago']:.0f}s ago", str(r["claimed"]),
                            str(r["stale_finishes"]))
        console.print(workers)
    for psp, p in sorted(doc["psp"].items()):
        lat = p["latency_seconds"]
        console.print(f"PSP {psp}: {p['requests']} requests, {p['throttles']} throttled (429); latency p50 "
                      f"{_num(lat['p50'])}s p95 {_num(lat['p95'])}s")
    pay = doc["payments"]
    at_risk = ", ".join(format_amount(v, k) for k, v in pay["money_at_risk"].items())
    if pay["unfinished"]:
        by_age = ", ".join(f"{k} {v}" for k, v in pay["unfinished_by_age"].items())
        console.print(f"unfinished payments by age: {by_age}; money at risk: {at_risk}")
    refunds = pay.get("refunds") or {}
    if refunds.get("by_status"):
        statuses = ", ".join(f"{k} {v}" for k, v in refunds["by_status"].items())
        flight = ", ".join(format_amount(v, k) for k, v in refunds["in_flight"].items()) or "none"
        console.print(f"refunds: {statuses}; in flight: {flight} (in the money at risk: {at_risk})")
    captures = pay.get("captures") or {}
    if captures.get("by_status") or captures.get("authorised"):
        statuses = ", ".join(f"{k} {v}" for k, v in captures["by_status"].items()) or "none"
        flight = ", ".join(format_amount(v, k) for k, v in captures["in_flight"].items()) or "none"
        held = ", ".join(format_amount(v, k) for k, v in captures["authorised"].items()) or "none"
        console.print(f"captures and cancels: {statuses}; captures in flight: {flight}; authorised, not captured: "
                      f"{held} ({captures['authorised_payments']} payments)")


def review_lines(doc: dict[str, Any]) -> None:
    """`recon stats`: payments in review, manual resolutions per day and operator, the last sweeps."""
    console = stdout_console()
    r = doc["review"]
    oldest = f", the oldest for {age_text(r['oldest_age_seconds'])}" if r["oldest_since"] else ""
    overdue = f", {r['overdue']} past their due-by" if r.get("overdue") else ""
    console.print(f"needs_review: {r['needs_review']} payments{oldest}{overdue}")
    rows = doc["resolutions"]["by_day"]
    if rows:
        table = FoldTable(title=f"manual resolutions since {doc['resolutions']['since'][:10]}")
        for col in ("day", "operator", "resolved as", "payments", "overrides"):
            table.add_column(col, justify="right" if col in ("payments", "overrides") else "left")
        for row in rows:
            table.add_row(row["day"], row["operator"] or "-", row["status"], str(row["count"]), str(row["overrides"]))
        console.print(table)
    if doc.get("webhooks"):
        per_psp: dict[str, list[str]] = {}
        for row in doc["webhooks"]:
            per_psp.setdefault(row["psp"], []).append(f"{row['state']} {row['events']}")
        console.print(f"webhook events, last {int(doc['window_seconds'])}s: "
                      + "; ".join(f"{psp}: {', '.join(parts)}" for psp, parts in sorted(per_psp.items())))
    disputes = doc.get("disputes") or {}
    if disputes.get("by_psp"):
        counted = "; ".join(f"{psp}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
                            for psp, c in sorted(disputes["by_psp"].items()))
        withdrawn = ", ".join(format_amount(v, k) for k, v in disputes["withdrawn"].items()) or "none"
        console.print(f"disputes: {counted}; open {disputes['open']}, withdrawn {withdrawn}, evidence due within "
                      f"{disputes['due_soon_days']} days: {disputes['due_soon']}")
    if doc["sweeps"]:
        table = FoldTable(title="last sweeps")
        for col in ("started", "by", "outcome", "exit", "checked", "healed", "needs_review"):
            table.add_column(col)
        for sweep in doc["sweeps"]:
            summary = sweep["summary"] or {}
            healed = sum(int(summary.get(k) or 0) for k in ("healed_succeeded", "healed_failed"))
            table.add_row((sweep["started_at"] or "")[:19], sweep["operator"], sweep["outcome"],
                          "-" if sweep["exit_code"] is None else str(sweep["exit_code"]),
                          str(summary.get("checked", "-")), str(healed) if summary else "-",
                          str(summary.get("needs_review", "-")))
        console.print(table)


def payouts_lines(doc: dict[str, Any]) -> None:
    """`recon stats`: the close's open exceptions by kind, what they leave unexplained, each PSP's last close."""
    console = stdout_console()
    p = doc["payouts"]
    kinds = ", ".join(f"{n} {kind}" for kind, n in p["open_by_kind"].items())
    console.print(f"payout exceptions open: {p['open_exceptions']}" + (f" ({kinds})" if kinds else ""))
    for currency, u in p["unmatched"].items():
        console.print(f"  unexplained {currency}: {u['payouts']} payouts {format_amount(u['payouts_amount'], currency)}"
                      f", {u['bank_entries']} bank entries {format_amount(u['bank_entries_amount'], currency)}")
    for c in p["last_close"]:
        state = "closed" if c["closed"] else f"{c['open_items']} open"
        console.print(f"last close {c['psp']}: {c['since']}..{c['until']} at {c['ran_at'][:19]}, {c['payouts']} "
                      f"payouts, {state}")


def operators_line(doc: dict[str, Any]) -> None:
    """The operators and their TOTP seeds at rest; plain seeds (from before sealing) named with the command that
    seals them."""
    o = doc["operators"]
    line = (f"operators: {o['count']} ({o['enabled']} enabled); TOTP seeds sealed {o['totp']['sealed']}, "
            f"plain {o['totp']['plain']}")
    if o["totp"]["plain"]:
        line += " (stored in plain text: recon operators seal-totp)"
    stdout_console().print(line)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def traffic_line(p: dict[str, Any]) -> str:
    """A PSP's traffic as `recon psp status` and `recon stats` say it: paused (by whom, since when), not
    configured (recon cannot call it: a key or setting is missing), or flowing (resumed by whom, when)."""
    if p["paused"]:
        return f"paused by {p['paused_by']} since {p['paused_at'][:19]}"
    if not p.get("configured", True):
        return "not configured"
    if p.get("resumed_by"):
        return f"flowing (resumed by {p['resumed_by']} at {p['resumed_at'][:19]})"
    return "flowing"


def psp_controls_table(psps: Sequence[dict[str, Any]], *, at: str | None = None) -> None:
    table = FoldTable(title=f"PSP controls at {at}" if at else "PSP controls")
    for col in ("psp", "traffic", "cool-down", "breaker", "failures", "next probe", "rate limit", "why"):
        table.add_column(col)
    for p in psps:
        traffic = traffic_line(p)
        cooling = f"{p['cooldown_seconds_left']:.1f}s left" if p["cooling_down"] else "-"
        probe = (p["next_probe_at"] or "")[:19] or "-"
        rate = f"{p['rate_limit']:g}/s" if p["rate_limit"] else "none"
        why = (p["pause_reason"] if p["paused"] else p["not_configured"] if not p.get("configured", True)
               else p["breaker_reason"] if p["breaker_state"] != "closed" else "")
        table.add_row(p["psp"], traffic, cooling, p["breaker_state"], str(p["consecutive_failures"]), probe, rate,
                      (why or "")[:60])
    stdout_console().print(table)
