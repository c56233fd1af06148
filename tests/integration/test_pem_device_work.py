"""A strings campaign's value work on the MicroPython device does not depend on the value
(spec §3.5, §7.1), on the real interpreter (device/tests/pem_work.py).

Values: empty, short, exactly max_len, longer than max_len (60 and 2,000 characters: the work
visits max_len slots, never the whole string), multi-byte (a cut inside a character, an
astral character), and values that are not strings (None, a number, a list: the all-NUL
code, the phase-2 dummy).

* Heap: one phase-1 trigger (pem: the code in place, key_λ in an array slot, FLH) and one
  phase-2 trigger (the code's key by the constant-work MurmurHash3, the trim, psgrr) allocate
  exactly the same bytes for every value (gc.mem_alloc() deltas).
* Time: both triggers timed per value in batches, interleaved in an order reshuffled every
  round; each sample over the median of its neighbours (set_timing.relative_times); every
  value's median within VALUE_SPREAD of 1. A miss is measured again, up to ATTEMPTS runs.
* Bytes: every phase-1 report equals the aggregator's reference on the same words, and every
  phase-2 report the reference psgrr over the code's key (so the measured work is the real one).
"""
import json
import struct
import subprocess
from pathlib import Path

from ldpfleet.core import strings_domain
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.provision import device_runner
from support import set_timing

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "device" / "tests" / "pem_work.py"
VALUES = ['""', '"a"', '"hello"', '"exactly8"', '"x" * 60', '"y" * 2000', '"h\\u00e9llo w\\u00f6rld"',
          '"\\u65e5\\u672c\\u8a9e\\u30c6\\u30ad"', '"\\U0001F600 smile"', 'None', '42', '["hello"]']
VALUE_SPREAD = 1.25
ATTEMPTS = 3
WORDS = list(struct.unpack("<3I", bytes(range(12))))


def run(tmp_path, rounds=25, batch=20):
    tmp_path.mkdir(parents=True, exist_ok=True)
    src, out = tmp_path / "in.json", tmp_path / "out.json"
    src.write_text(json.dumps({"values": VALUES, "rounds": rounds, "batch": batch}))
    proc = subprocess.run([device_runner.micropython_binary(), str(SCRIPT), str(src), str(out)],
                          env=device_runner.micropython_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def time_problems(result):
    rel = set_timing.relative_times({"rounds": result["rounds"]}, len(VALUES))
    figure = {v: set_timing.quantile(xs, 0.5) for v, xs in zip(VALUES, rel)}
    return ["%s at %.2f x its neighbours" % (v, f) for v, f in sorted(figure.items())
            if not 1 / VALUE_SPREAD <= f <= VALUE_SPREAD]


def test_pem_work_does_not_depend_on_the_value(tmp_path):
    result = run(tmp_path / "0")
    assert len(set(result["alloc1"])) == 1, dict(zip(VALUES, result["alloc1"]))
    assert len(set(result["alloc2"])) == 1, dict(zip(VALUES, result["alloc2"]))
    # the reports are the reference's: the work measured is the real one
    pem = make_mechanism("pem", 2000, 2 ** 32 - 1, salt=3735928559, campaign_id=305419896,
                         phase=1, g=8, kp=16, levels=[8, 24, 40, 64])
    ps = make_mechanism("psgrr", 2000, 2 ** 32 - 1, salt=3735928559, campaign_id=305419896,
                        phase=2, l=1, candidates=[1, 2, 3, 4])
    for expr, r1, r2 in zip(VALUES, result["report1"], result["report2"]):
        v = eval(expr)
        assert r1 == pem.reference_report({"device": "dev-1", "value": v}, WORDS, 7).hex(), expr
        code = strings_domain.code_of(v, 8)
        assert r2 == ps.reference_report(strings_domain.phase2_element(code), WORDS, 7).hex(), expr
    attempts = [time_problems(result)]
    while attempts[-1] and len(attempts) < ATTEMPTS:
        attempts.append(time_problems(run(tmp_path / str(len(attempts)))))
    assert not attempts[-1], "the value shows in a trigger's time on every attempt: %s" % (attempts,)
