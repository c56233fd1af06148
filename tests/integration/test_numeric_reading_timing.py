"""A numeric reading's work on the device does not depend on the reading (spec §1.1, §7.1).

The real MicroPython interpreter runs the device code (tests/support/numeric_timing.py) on
readings of every kind: floats in range, 0.0, -0.0, negative, clipped at either end, ±1e300,
±inf, NaN; ints small, negative and beyond the float range (10**400); a missing or non-numeric
reading (None, a string, a bool, a list, a dict) beside a float; for hm, lists of two readings
with NaN / inf / huge ints inside, shorter and longer lists and not a list.

* Heap: `numeric_domain.grid_point` allocates exactly the same bytes for every reading of a
  class (floats; ints; a float and every missing / non-numeric reading), and so does the whole
  trigger (`Device._input` -> `mech.report`) of duchi, pm, sw and hm (deterministic:
  gc.mem_alloc() deltas). The type of a reading is public (a firmware's sensor returns one
  type), its value is not. Before the change grid_point allocated 128 B for a non-number,
  384 B for a float and 416 B for NaN or an int, and the triggers 768-1056 B (hm 1024-1600 B).
* Time: `grid_point` timed per reading, interleaved in an order reshuffled every round; each
  sample over the median of its neighbours (set_timing.relative_times); every reading's median
  ratio within VALUE_SPREAD of 1. A miss is measured again, up to ATTEMPTS runs in all (noise
  does not repeat). Before the change a non-number took ~0.5x a float's time.
* Bytes: every trigger's report equals the aggregator's reference (`NumericDomain.grid_point`
  of the reading, hm: of each metric's reading, then `reference_report` on the same words) and
  the C client's (`ldp_client vector` on the grid point of the C kernel `ldp_grid_point` that
  the client links, the reading as its cJSON value would carry it). NaN and ±inf cannot travel
  in JSON (value.json, --value), so this is where they are compared; test_numeric_device_loop.py
  compares whole device runs for the readings JSON carries.
"""
import json
import math
import struct
import subprocess

import pytest

from ldpfleet._kernels import lib
from ldpfleet.core import config as campaign_config
from ldpfleet.core.mechanisms.numeric import NumericDomain
from support import numeric_timing, set_timing
from support.c_client import build_client, client_env

VALUE_SPREAD = 1.2
ATTEMPTS = 3


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    return numeric_timing.run_micropython(tmp_path_factory.mktemp("numeric-timing"))


def heap_problems(result):
    """What in one run shows a reading in the heap (empty: nothing)."""
    out = []
    for cls, cases in numeric_timing.readings().items():
        got = {label: result["grid_alloc"][label] for label, _ in cases}
        if len(set(got.values())) != 1:
            out.append("grid_point, %s readings: %s" % (cls, got))
    for name, (_, cases) in numeric_timing.campaigns().items():
        trig = result["triggers"][name]
        classes = ([[label for label, _ in cases]] if name == "hm" else
                   [[label for label, _ in c] for c in numeric_timing.readings().values()])
        for labels in classes:
            got = {label: trig[label]["alloc"] for label in labels}
            if len(set(got.values())) != 1:
                out.append("%s trigger: %s" % (name, got))
    return out


def time_problems(result):
    labels = [label for label, _ in numeric_timing.flat_readings()]
    rel = set_timing.relative_times({"rounds": result["grid_rounds"]}, len(labels))
    figure = {label: set_timing.quantile(xs, 0.5) for label, xs in zip(labels, rel)}
    return ["%s at %.2f x its neighbours" % (label, f) for label, f in sorted(figure.items())
            if not 1 / VALUE_SPREAD <= f <= VALUE_SPREAD]


def test_heap_does_not_depend_on_the_reading(measured):
    assert heap_problems(measured) == []


def test_grid_point_time_does_not_depend_on_the_reading(measured, tmp_path):
    attempts = [time_problems(measured)]
    while attempts[-1] and len(attempts) < ATTEMPTS:
        again = numeric_timing.run_micropython(tmp_path / str(len(attempts)))
        attempts.append(time_problems(again))
    assert not attempts[-1], "the reading shows in grid_point's time on every attempt: %s" % (
        attempts,)


def metric_readings(value, metrics):
    """Each metric's reading of a device value (spec §1.1): a list gives one per metric in
    order (missing ones None), anything else is the first metric's."""
    readings = value if isinstance(value, list) else [value]
    return [readings[a] if a < len(readings) else None for a in range(metrics)]


def c_grid_point(reading, lo, hi, dec, n):
    """The C client's grid point: its cJSON number (strtod: an int beyond the float range is
    ±inf) through the linked kernel, anything else not a number."""
    if not isinstance(reading, (int, float)) or isinstance(reading, bool):
        return lib.ldp_grid_point(0.0, 0, lo, hi, dec, n)
    try:
        v = float(reading)
    except OverflowError:
        v = math.inf if reading > 0 else -math.inf
    return lib.ldp_grid_point(v, 1, lo, hi, dec, n)


def test_report_bytes_agree_with_the_reference_and_the_c_client(measured):
    binary = build_client()
    for name, (doc, cases) in numeric_timing.campaigns().items():
        mech = campaign_config.mechanism_for_phase(doc, 1)
        dom = NumericDomain(doc["domain"])
        words = numeric_timing.stream_words()
        w = [next(words) for _ in range(mech.random_words)]
        for label, expr in cases:
            readings = metric_readings(eval(expr), len(dom.metrics))
            xs = [dom.grid_point(r, a) for a, r in enumerate(readings)]
            cx = [c_grid_point(r, *dom.metrics[a], dom.points) for a, r in enumerate(readings)]
            assert cx == xs, (name, label)
            x = xs if name == "hm" else xs[0]
            want = mech.reference_report(x, w, numeric_timing.NONCE).hex()
            assert measured["triggers"][name][label]["report"] == want, (name, label, x)
            case = dict(mech.describe(), value=x, nonce=numeric_timing.NONCE)
            proc = subprocess.run([str(binary), "vector", "--case", json.dumps(case),
                                   "--words-hex", struct.pack("<%dI" % len(w), *w).hex()],
                                  capture_output=True, text=True, env=client_env(), timeout=60)
            assert proc.returncode == 0 and proc.stdout.strip() == want, (name, label, proc.stderr)
