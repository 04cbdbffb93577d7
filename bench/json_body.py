"""The cost of reading request bodies strictly (``app.core.json_body.parse``: repeated keys refused)
against a bare ``json.loads`` of the same bytes.

Setting: a 10,000-patient ``POST /v1/risk/batch`` body (the largest batch; about 1.6 MB, 20,001
JSON objects) and a single-patient ``POST /v1/risk`` body. The two parsers alternate, so both
see the same machine load; medians and minima over ``--repeat`` runs.

Goal: the check costs at most 10 ms on the 10,000-patient batch and at most 20 µs on one patient
(whose request has a p99 goal of 10 ms).
Run: .venv/bin/python bench/json_body.py [--repeat 60]
"""

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from app.core.json_body import parse

PATIENT = {"age": 34, "phq9": 22, "gaf": 35, "num_sessions": 12, "substance_use": 1,
           "prior_crisis": 1}


def _batch(n: int) -> bytes:
    patients = [{"id": f"clinic-a/patient-{i:08d}/encounter-2026-01", "features": PATIENT}
                for i in range(n)]
    return json.dumps({"patients": patients, "model_id": 1}).encode()


def _timed(read: Callable[[bytes], Any], body: bytes) -> float:
    start = time.perf_counter()
    read(body)
    return time.perf_counter() - start


def _compare(name: str, body: bytes, repeat: int, unit: float, unit_name: str) -> None:
    bare: list[float] = []
    strict: list[float] = []
    for _ in range(repeat):
        bare.append(_timed(json.loads, body))
        strict.append(_timed(parse, body))
    b, s = statistics.median(bare) * unit, statistics.median(strict) * unit
    print(f"{name} ({len(body):,} bytes): json.loads median {b:.2f} {unit_name} "
          f"(min {min(bare) * unit:.2f}), strict parse median {s:.2f} {unit_name} "
          f"(min {min(strict) * unit:.2f}); overhead {s - b:+.2f} {unit_name} "
          f"({(s - b) / b:+.0%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=60)
    args = parser.parse_args()
    gc.collect()
    gc.freeze()  # as the service does after start-up: full collections stay cheap
    _compare("10,000-patient batch", _batch(10_000), args.repeat, 1e3, "ms")
    single = json.dumps({"features": PATIENT}).encode()
    _compare("single patient", single, args.repeat * 100, 1e6, "µs")


if __name__ == "__main__":
    main()
