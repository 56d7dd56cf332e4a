#!/usr/bin/env python3
"""Markdown tables from the files scripts/reliability/run.sh wrote (argument: its OUT_DIR)."""

import json
import pathlib
import sys


def load(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def main():
    out = pathlib.Path(sys.argv[1])
    machine = (out / "machine.txt").read_text().strip() if (out / "machine.txt").exists() else ""
    print(machine.replace("\n", "; "))
    print()
    soak, rss = load(out / "soak.json"), load(out / "soak_rss.json")
    if soak:
        errors = sum(soak["errors"].values())
        non_200 = sum(v for k, v in soak["status"].items() if k != "200")
        print("| soak | clients | seconds | requests | answered 200 | other status | errors | p50 (ms) | p99 (ms) | max (ms) | requests/s | RSS start / end / peak (MiB) | exit |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        print(f"| mock model, keep-alive, score/geval/completions mix | {soak['clients']} | {soak['seconds']} | {soak['requests']} "
              f"| {soak['status'].get('200', 0)} | {non_200} | {errors} {soak['errors'] or ''} | {soak['p50_ms']} | {soak['p99_ms']} "
              f"| {soak['max_ms']} | {soak['per_second']} | {rss['rss_start_mib']} / {rss['rss_end_mib']} / {rss['peak_rss_mib']} | {rss['exit']} |")
        print()
    burst, health, brss = load(out / "burst.json"), load(out / "burst_health.json"), load(out / "burst_rss.json")
    if burst:
        lost = burst["errors"].get("dropped", 0) + burst["errors"].get("timeout", 0)
        print("| burst | clients x requests | sent | 200 | 503 (Retry-After) | other status | refused connections | lost (sent, no answer) | p50 (ms) | p99 (ms) | peak RSS (MiB) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        other = sum(v for k, v in burst["status"].items() if k not in ("200", "503"))
        print(f"| 10x (model 2 ms a call, distinct texts, queue bound 256, connection bound 512) | {burst['clients']} x 4 | {burst['requests']} "
              f"| {burst['status'].get('200', 0)} | {burst['status'].get('503', 0)} | {other} | {burst['errors'].get('refused', 0)} "
              f"| {lost} | {burst['p50_ms']} | {burst['p99_ms']} | {brss['peak_rss_mib'] if brss else '?'} |")
        if health:
            print(f"\nservice counters after the burst: refused by the queue {health.get('refused')}, jobs {health.get('jobs')}, rounds {health.get('rounds')}")
        print()
    load_, term = load(out / "sigterm_load.json"), load(out / "sigterm.json")
    if term:
        print("| SIGTERM under load | exit code | seconds from signal to exit | queued at the signal | answered 200 | 503 | refused after close | lost (sent, no answer) |")
        print("|---|---|---|---|---|---|---|---|")
        errors = load_["errors"] if load_ else {}
        status = load_["status"] if load_ else {}
        print(f"| 64 clients, model 100 ms a call | {term['exit']} | {term['seconds_to_exit']} | {term['queued_at_signal']} "
              f"| {status.get('200', 0)} | {status.get('503', 0)} | {errors.get('refused', 0)} | {errors.get('dropped', 0) + errors.get('timeout', 0)} |")
        print(f"\nservice's last line: `{term['server_line']}`")
        print()
    faults = out / "faults.txt"
    if faults.exists():
        print("Faults (raw, as the script recorded them):\n")
        print("```")
        print(faults.read_text().strip())
        print("```")
        print()
    fuzz = out / "fuzz.txt"
    if fuzz.exists():
        print("Fuzz:\n")
        print("```")
        print(fuzz.read_text().strip())
        print("```")


if __name__ == "__main__":
    main()
