#!/usr/bin/env python3
"""Load generator for `nlg-judge serve` on loopback (standard library only).

N client threads send requests until a deadline or a request budget is reached,
whichever comes first, and print one JSON summary: requests answered by status,
connection errors by kind, latency percentiles (ms), throughput.

Error kinds: `refused` (the connection was refused: nothing was sent), `dropped` (the
request was sent, or partly sent, and no answer came: the connection was closed or
reset), `timeout` (no answer within --timeout). A request that is `dropped` is lost
silently; a 503 is an answer.

With --token the requests carry `Authorization: Bearer <token>`; with --tls-ca they go
over HTTPS, verified against that CA.

Loopback only: the address must be 127.0.0.0/8 or localhost.
"""

import argparse
import http.client
import ipaddress
import json
import socket
import ssl
import threading
import time

BODIES = {
    "score": ("/v1/score", {"output": "The cat sat on the mat.", "attribute": "fluency",
                            "context": "Describe the cat."}),
    "geval": ("/v1/geval", {"output": "The cat sat on the mat.", "criteria": "coherence",
                            "context": "A story about a cat.", "steps": "1. Read.\n2. Rate."}),
    "completions": ("/v1/completions", {"model": "mock", "prompt": "Once upon a time",
                                        "max_tokens": 4, "logprobs": 1}),
}


def check_loopback(host):
    if host == "localhost":
        return
    if not ipaddress.ip_address(host).is_loopback:
        raise SystemExit(f"refusing to send load to {host}: loopback addresses only")


class Totals:
    def __init__(self):
        self.lock = threading.Lock()
        self.status = {}
        self.errors = {}
        self.latencies = []
        self.sent = 0

    def take(self, budget):
        with self.lock:
            if budget is not None and self.sent >= budget:
                return False
            self.sent += 1
            return True

    def record(self, status=None, error=None, latency=None):
        with self.lock:
            if status is not None:
                self.status[status] = self.status.get(status, 0) + 1
                self.latencies.append(latency)
            if error is not None:
                self.errors[error] = self.errors.get(error, 0) + 1


def client(host, port, kinds, index, deadline, budget, totals, keepalive, timeout, per_client,
           unique, token=None, tls=None):
    connection = None
    done = 0
    while time.monotonic() < deadline and (per_client is None or done < per_client):
        if not totals.take(budget):
            return
        done += 1
        path, body = BODIES[kinds[(index + done) % len(kinds)]]
        if unique and "output" in body:
            # A text of its own, so that the service's result cache cannot answer it.
            body = dict(body, output=f"{body['output']} #{index}-{done}")
        payload = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if not keepalive:
            headers["Connection"] = "close"
        started = time.monotonic()
        try:
            if connection is None:
                if tls is None:
                    connection = http.client.HTTPConnection(host, port, timeout=timeout)
                else:
                    connection = http.client.HTTPSConnection(host, port, timeout=timeout,
                                                             context=tls)
                connection.connect()
        except ConnectionRefusedError:
            totals.record(error="refused")
            connection = None
            time.sleep(0.01)
            continue
        except OSError as error:
            totals.record(error=f"connect: {type(error).__name__}")
            connection = None
            time.sleep(0.01)
            continue
        try:
            connection.request("POST", path, body=payload, headers=headers)
            response = connection.getresponse()
            response.read()
            totals.record(status=response.status, latency=(time.monotonic() - started) * 1000)
            if not keepalive or response.getheader("connection", "").lower() == "close":
                connection.close()
                connection = None
            if response.status == 503:
                time.sleep(float(response.getheader("retry-after", "1") or 1) * 0.05)
        except socket.timeout:
            totals.record(error="timeout")
            connection.close()
            connection = None
        except (ConnectionError, http.client.HTTPException, OSError) as error:
            # Sent (or partly sent) and no answer: on a reused connection the service may
            # have closed it between requests, which the client cannot tell from a loss.
            totals.record(error="dropped")
            connection.close()
            connection = None
    if connection is not None:
        connection.close()


def percentile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))
    return round(ordered[k], 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", required=True, help="HOST:PORT (loopback)")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds (upper bound)")
    parser.add_argument("--max-requests", type=int, default=None, help="total budget")
    parser.add_argument("--per-client", type=int, default=None, help="requests per client")
    parser.add_argument("--kinds", default="score,geval,completions")
    parser.add_argument("--keepalive", action="store_true")
    parser.add_argument("--unique", action="store_true", help="a distinct output text per request")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--token", default=None, help="bearer token of every request")
    parser.add_argument("--tls-ca", default=None, help="HTTPS, verified against this CA (PEM)")
    args = parser.parse_args()
    host, port = args.addr.rsplit(":", 1)
    check_loopback(host)
    kinds = args.kinds.split(",")
    totals = Totals()
    tls = ssl.create_default_context(cafile=args.tls_ca) if args.tls_ca else None
    started = time.monotonic()
    deadline = started + args.duration
    threads = [
        threading.Thread(
            target=client,
            args=(host, int(port), kinds, k, deadline, args.max_requests, totals,
                  args.keepalive, args.timeout, args.per_client, args.unique, args.token, tls),
            daemon=True,
        )
        for k in range(args.clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(args.duration + args.timeout + 5)
    elapsed = time.monotonic() - started
    answered = sum(totals.status.values())
    summary = {
        "clients": args.clients,
        "seconds": round(elapsed, 2),
        "requests": answered + sum(totals.errors.values()),
        "answered": answered,
        "status": {str(k): v for k, v in sorted(totals.status.items())},
        "errors": totals.errors,
        "p50_ms": percentile(totals.latencies, 0.50),
        "p99_ms": percentile(totals.latencies, 0.99),
        "max_ms": percentile(totals.latencies, 1.0),
        "per_second": round(answered / elapsed, 1) if elapsed > 0 else None,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
