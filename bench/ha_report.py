"""The tables of `bench/ha.py` (failover time, replication cost, initial sync) and its goals."""

from __future__ import annotations

import statistics

from stompbench.metrics import Measurement
from stompbench.report import figure as _fmt

ZK_SESSION_MS = 2000
GOALS = {"failover": "median < 1 s", "cost": ">= 0.6× alone", "rabbitmq": ">= 2× RabbitMQ S2"}




def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def failover_table(summaries: list[dict], session_ms: int = ZK_SESSION_MS) -> str:
    head = ["mode", "runs ok", "kill -> first confirmed send, p50 ms", "p99 ms", "max ms",
            "kill -> other node serving (/health ok), p50 ms", "kill -> client reconnected, p50 ms",
            f"goal ({GOALS['failover']})"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    names = {"replication": "replication, lone_pair_failover", "shared_store": "shared store",
             "zookeeper": f"replication, ZooKeeper lock (session_ms {session_ms})"}
    for s in summaries:
        f = s["failover_s"]
        ms = {k: (v * 1e3 if v is not None else None) for k, v in f.items()}
        verdict = "–" if ms["p50"] is None else ("met" if ms["p50"] < 1000 else "NOT met")
        ok = f"{s['ok']}/{s['runs']}" + (f" ({s['error'][:80]})" if s["error"] else "")
        lines.append("| " + " | ".join([
            names.get(s["mode"], s["mode"]), ok, _fmt(ms["p50"]), _fmt(ms["p99"]), _fmt(ms["max"]),
            _fmt(s["serving_s"]["p50"] and s["serving_s"]["p50"] * 1e3),
            _fmt(s["reconnect_s"]["p50"] and s["reconnect_s"]["p50"] * 1e3), verdict]) + " |")
    return "\n".join(lines)


def cost_summary(measured: list[Measurement]) -> dict:
    out: dict = {}
    for m in measured:
        out.setdefault((m.row, m.broker), []).append(m)
    table = {}
    for key, ms in out.items():
        good = [m for m in ms if m.ok]
        table[key] = {"runs": len(ms), "ok": len(good),
                      **{k: _median(getattr(m, k, None) for m in good)
                         for k in ("rate", "p50_ms", "p99_ms", "cpu_us_per_msg", "backup_cpu_us")},
                      "rates": [m.rate for m in good]}
    return table


def cost_table(table: dict) -> str:
    head = ["row", "alone msgs/s", "pair msgs/s", "pair / alone", f"goal ({GOALS['cost']})",
            "p50 ms alone / pair", "p99 ms alone / pair", "live CPU µs/msg alone / pair", "backup CPU µs/msg",
            "RabbitMQ msgs/s", f"pair / RabbitMQ ({GOALS['rabbitmq']})"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in ("S2", "S5 fill", "S5 drain"):
        a, p, r = table.get((row, "alone")), table.get((row, "pair")), table.get((row, "rabbitmq"))
        if not a and not p:
            continue
        a = a or {}
        p = p or {}

        def cell(d: dict, k: str = "rate") -> str:
            v = _fmt(d.get(k))
            if d and k == "rate" and d["ok"] < d["runs"]:
                v += f" ({d['ok']}/{d['runs']} runs)"
            return v

        ratio = p["rate"] / a["rate"] if p.get("rate") and a.get("rate") else None
        goal = "–" if row == "S5 drain" or ratio is None else ("met" if ratio >= 0.6 else "NOT met")
        rr = p["rate"] / r["rate"] if r and p.get("rate") and r.get("rate") else None
        rverdict = "–" if rr is None else f"{rr:.2f}× " + ("met" if rr >= 2 else "NOT met")
        lines.append("| " + " | ".join([
            row, cell(a), cell(p), "–" if ratio is None else f"{ratio:.2f}×", goal,
            f"{_fmt(a.get('p50_ms'), 2)} / {_fmt(p.get('p50_ms'), 2)}",
            f"{_fmt(a.get('p99_ms'), 2)} / {_fmt(p.get('p99_ms'), 2)}",
            f"{_fmt(a.get('cpu_us_per_msg'))} / {_fmt(p.get('cpu_us_per_msg'))}", _fmt(p.get("backup_cpu_us")),
            cell(r) if r else "–", rverdict]) + " |")
    return "\n".join(lines)


def sync_table(s: dict) -> str:
    def med(key: str, only_inside: bool = False) -> tuple[float | None, int]:
        ms = [d for d in s.get(key, []) if not d.get("error") and (not only_inside or d.get("whole_within_sync"))]
        return _median(d.get("rate") for d in ms), len(ms)

    without, n0 = med("without")
    during, n1 = med("during", only_inside=True)
    after, n2 = med("after")
    fill = s.get("fill") or {}
    lines = ["| figure | value |", "|---|---|",
             f"| backlog | {s['backlog_messages']:,} persistent messages × {s['backlog_size']:,} B = "
             f"{s['backlog_bytes'] / 2**20:,.0f} MiB; live data dir {_fmt(s.get('journal_mib'))} MiB |",
             f"| backlog fill (confirmed sends/s, 1 CORE producer, 1,000 unconfirmed) | {_fmt(fill.get('rate'))} |",
             f"| backup start -> in sync, s | {_fmt(s.get('sync_s'), 2)} "
             f"(backup data dir after: {_fmt(s.get('backup_journal_mib'))} MiB) |",
             f"| S1 msgs/s, no backup (median of {n0}) | {_fmt(without)} |",
             f"| S1 msgs/s while the backup syncs (median of {n1} run(s) inside the sync) | {_fmt(during)} |",
             f"| S1 during / without | {'–' if not (during and without) else f'{during / without:.2f}×'} |",
             f"| S1 msgs/s, backup in sync (median of {n2}) | {_fmt(after)} |"]
    if s.get("error"):
        lines.append(f"| error | {s['error'][:300]} |")
    return "\n".join(lines)
