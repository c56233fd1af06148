"""Benchmark the MicroPython device client on the unix port; prints JSON.

For each mechanism (typical device parameters, ε = 2), from `.mpy` files (mpy-cross -march=x64):
  us_per_report      CPU time (user + sys, from the child's rusage) of `--reports` reports minus
                     that of the same script with 0 reports, per report; the minimum over
                     `--repeats` runs (CPU time, not wall time: robust to a busy machine)
  wall_us_per_report the in-interpreter wall clock (ticks_us) of the same loop, median
  resident_bytes     heap held after importing the mechanism and building it (gc.collect())
  cycle_alloc_bytes  heap allocated by one report (gc.mem_alloc() delta, no collection between)
  peak_bytes         resident + cycle allocation (+ the interpreter's own baseline)
  min_heap_bytes     smallest `-X heapsize` (bisected, 256-byte steps) that imports, builds and
                     produces 200 reports
With --readings, also duchi/pm/sw reports from a float reading (grid point + report, as the device
loop makes them), wall µs per report. With --device, also the smallest heap that runs the whole device (config verification, ledger,
MQTT, one OLH report) against a private Mosquitto.

Run: python tools/bench_device.py [--reports N] [--repeats R] [--device] [--source]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "aggregator"))
sys.path.insert(0, str(ROOT / "tests"))

from ldpfleet.provision import device_runner  # noqa: E402
from support.devices import report_cycle_script, run_device  # noqa: E402  (tests/support)

EPS_MILLI = 2000
CASES = {
    "grr": (1024, {}, 5),
    "olh": (1024, {"g": 8}, 5),
    "flh": (1024, {"g": 8, "kp": 10000}, 5),
    "oue": (64, {}, 5),
    "cms": (1024, {"k": 256, "m": 1024}, 5),
    "hcms": (1024, {"k": 1024, "m": 1024}, 5),
    "sh": (1 << 20, {"m": 1024, "l": 4}, [5, 77, 1000]),
    "srappor": (1 << 20, {"l": 4, "candidates": list(range(0, 640, 10))}, [5, 70, 1000]),
    "lcm": (1024, {"k": 256, "m": 1024}, {"key": 5, "high": False}),
    "psgrr": (1 << 20, {"l": 4, "candidates": list(range(0, 640, 10))}, [5, 70, 1000]),
    "psolh": (1 << 20, {"l": 4, "g": 8, "candidates": list(range(0, 640, 10))}, [5, 70, 1000]),
    # numeric metrics (spec §3.2): N grid points, the value a grid point (hm: one per metric)
    "duchi": (1251, {}, 617),
    "pm": (1251, {}, 617),
    "hm": (1001, {"metrics": 10}, [0, 100, 250, 500, 617, 700, 800, 900, 999, 1000]),
    "sw": (65536, {"bins": 256, "window": 131}, 12345),
}

def cycle_script(name, reports, workdir):
    d, params, value = CASES[name]
    path = Path(workdir) / ("cycle_%s_%d.py" % (name, reports))
    path.write_text(report_cycle_script(name, EPS_MILLI, d, params, value, reports))
    return [str(path)]


def run_script(args, lib, heap=None):
    """(exit code, stdout + stderr, CPU seconds of the child)."""
    argv = [device_runner.micropython_binary()]
    if heap:
        argv += ["-X", "heapsize=%d" % heap]
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(argv + args, env=device_runner.micropython_env(lib),
                                stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        return proc.returncode, out.read(), usage.ru_utime + usage.ru_stime


def min_heap(ok, lo=2048, hi=262144, step=256):
    """Smallest heap in [lo, hi] (multiple of `step`) for which ok(heap) holds, assuming
    monotonicity; None if even `hi` fails."""
    if not ok(hi):
        return None
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def bench_mechanism(name, lib, workdir, reports, repeats):
    loaded, empty = cycle_script(name, reports, workdir), cycle_script(name, 0, workdir)
    cpu, wall, first = [], [], None
    for _ in range(repeats):
        code, out, busy = run_script(loaded, lib)
        code0, out0, idle = run_script(empty, lib)
        if code or code0:
            raise RuntimeError("%s failed: %s" % (name, out + out0))
        cpu.append((busy - idle) * 1e6 / reports)
        b, resident, cycle, total_us = out.split()
        wall.append(int(total_us) / reports)
        first = first or {"base": int(b), "resident": int(resident), "cycle": int(cycle)}
    small = cycle_script(name, 200, workdir)
    heap = min_heap(lambda h: run_script(small, lib, h)[0] == 0)
    wall.sort()
    params = dict(CASES[name][1])
    if "candidates" in params:
        params["kc"] = len(params.pop("candidates"))
    return {"us_per_report": round(max(min(cpu), 0.0), 3), "wall_us_per_report": round(wall[len(wall) // 2], 3),
            "resident_bytes": first["resident"], "cycle_alloc_bytes": first["cycle"],
            "interpreter_base_bytes": first["base"],
            "peak_bytes": first["base"] + first["resident"] + first["cycle"],
            "min_heap_bytes": heap, "params": params, "domain_size": CASES[name][0]}


READING_CYCLE = """import gc, time
from ldp.numeric_domain import grid_point
from ldp.%(name)s import MECHANISM
mech = MECHANISM(%(eps)d, 1251, 0x1234, 77, 1, %(params)r)
readings = [21.5, -40.0, 85.0, 1000.0, 3.7, None, 22.25, -3.1]
t0 = time.ticks_us()
for i in range(%(reports)d):
    mech.report(grid_point(readings[i & 7], -400, 850, 1, 1251), i)
dt = time.ticks_diff(time.ticks_us(), t0)
print(dt)
"""


def bench_reading(name, lib, workdir, reports, repeats):
    """A numeric report from the reading, as the device makes it: the grid point of spec §1.1
    (-40.0..85.0 by 0.1, readings in range, clipped and missing) and the report; the
    in-interpreter wall clock (ticks_us), median over `repeats` runs, µs per report."""
    params = {"bins": 256, "window": 131} if name == "sw" else {}
    path = Path(workdir) / ("reading_%s.py" % name)
    path.write_text(READING_CYCLE % {"name": name, "eps": EPS_MILLI, "params": params,
                                     "reports": reports})
    wall = []
    for _ in range(repeats):
        code, out, _cpu = run_script([str(path)], lib)
        if code:
            raise RuntimeError("%s failed: %s" % (name, out))
        wall.append(int(out.split()[-1]) / reports)
    wall.sort()
    return {"wall_us_per_report": round(wall[len(wall) // 2], 3), "domain": "-40.0..85.0 by 0.1",
            "params": params}


def bench_device(lib, workdir):
    """Smallest heap that runs one whole device cycle (--once) against a private broker."""
    from support.brokers import PrivateMosquitto
    from support.devices import SIGNING_KEY, ReportCollector, config_doc
    from ldpfleet.core import config as campaign_config

    with PrivateMosquitto() as broker:
        collector = ReportCollector(broker.port)
        doc = config_doc("bench", mechanism="olh", eps_milli=EPS_MILLI, params={"g": 8},
                         domain={"type": "int", "size": 1024})
        collector.publish("ldp/bench/config", campaign_config.sign(doc, SIGNING_KEY))
        counter = [0]

        def ok(heap):
            counter[0] += 1
            state = Path(workdir) / ("dev%d" % counter[0])
            device_runner.prepare_device(state, "bench-%d" % counter[0], SIGNING_KEY, value=5,
                                         campaign="bench")
            proc = run_device(state, "127.0.0.1", broker.port, wait=30,
                                            lib_dir=lib, heapsize=heap)
            return proc.returncode == 0

        heap = min_heap(ok, lo=8192)
        collector.close()
    return {"mechanism": "olh", "params": {"g": 8}, "min_heap_bytes": heap}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reports", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--mechanisms", nargs="*", default=sorted(CASES))
    ap.add_argument("--device", action="store_true", help="also bisect the whole device's heap")
    ap.add_argument("--source", action="store_true", help="run from .py sources instead of .mpy")
    ap.add_argument("--readings", action="store_true",
                    help="also time duchi/pm/sw reports made from a reading (its grid point, "
                         "spec §1.1, then the report), as the device loop makes them")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        lib = device_runner.DEVICE_DIR if args.source else device_runner.compile_mpy(Path(tmp) / "mpy")
        out = {"interpreter": subprocess.run([device_runner.micropython_binary(), "-c",
                                              "import sys; print(sys.version)"],
                                             capture_output=True, text=True).stdout.strip(),
               "code": "py" if args.source else "mpy (mpy-cross -march=x64)",
               "eps_milli": EPS_MILLI, "load_average": os.getloadavg(), "mechanisms": {}}
        for name in args.mechanisms:
            # long-bitmap mechanisms draw one word per bit: fewer reports keep the run short
            n = args.reports if name not in ("cms", "lcm") else max(args.reports // 20, 200)
            out["mechanisms"][name] = bench_mechanism(name, lib, tmp, n, args.repeats)
        if args.readings:
            out["from_reading"] = {name: bench_reading(name, lib, tmp, args.reports, args.repeats)
                                   for name in ("duchi", "pm", "sw")}
        if args.device:
            out["device_cycle"] = bench_device(lib, tmp)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
