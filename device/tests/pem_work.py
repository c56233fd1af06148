"""A strings campaign's value work on MicroPython, per value (run by
tests/integration/test_pem_device_work.py; spec §3.5, §7.1).

  micropython pem_work.py IN_JSON OUT_JSON

IN: {"values": [expression, ...], "rounds": R, "batch": B}. OUT: per value the heap bytes of
one phase-1 trigger (pem: code, prefix key, FLH) and one phase-2 trigger (the code's key, the
trim to the candidates, psgrr), their reports (hex), and "rounds": per round [[value index,
us of B phase-1 + phase-2 triggers], ...] in an order reshuffled every round.
"""
import gc
import json
import os
import sys
import time

from ldp.mechanisms import make
from ldp.sets import candidate_index, trim
from ldp.pemkey import phase2_keyset

MAX_LEN = 8
SALT = 3735928559
CID = 305419896
CANDIDATES = [1, 2, 3, 4]
WORDS = bytes(range(12))


def rand(n):
    return WORDS[:n]


def main(argv):
    with open(argv[0]) as f:
        spec = json.load(f)
    values = [eval(e) for e in spec["values"]]
    pem = make("pem", 2000, 0x100000000, SALT, CID, 1, {"g": 8, "kp": 16, "levels": [8, 24, 40, 64]})
    ps = make("psgrr", 2000, 0xFFFFFFFF, SALT, CID, 2, {"l": 1, "candidates": CANDIDATES})
    index = candidate_index(CANDIDATES)

    def one(v):
        return pem.report({"device": "dev-1", "value": v}, 7, rand)

    def two(v):
        return ps.report(trim(phase2_keyset(v, MAX_LEN), index), 7, rand)

    out = {"alloc1": [], "alloc2": [], "report1": [], "report2": [], "rounds": []}
    for v in values:
        for fn, key in ((one, "1"), (two, "2")):
            fn(v)
            gc.collect()
            before = gc.mem_alloc()
            r = fn(v)
            out["alloc" + key].append(gc.mem_alloc() - before)
            out["report" + key].append("".join("%02x" % b for b in r))
    order = list(range(len(values)))
    batch = spec["batch"]
    for _ in range(spec["rounds"]):
        for i in range(len(order) - 1, 0, -1):  # Fisher-Yates from the OS RNG
            j = int.from_bytes(os.urandom(2), "little") % (i + 1)
            order[i], order[j] = order[j], order[i]
        seq = []
        for j in order:
            v = values[j]
            gc.collect()
            t0 = time.ticks_us()
            for _ in range(batch):
                one(v)
                two(v)
            seq.append([j, time.ticks_diff(time.ticks_us(), t0)])
        out["rounds"].append(seq)
    with open(argv[1], "w") as f:
        json.dump(out, f)


main(sys.argv[1:])
