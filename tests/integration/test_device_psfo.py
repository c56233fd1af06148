"""The padding-and-sampling oracles (psgrr, psolh; spec §3 ids 10, 11) on both device clients:
each client builds the mechanism from exactly the parameters the aggregator accepts
(`ldpfleet.core.mechanisms.psfo`) and refuses the others, naming the aggregator's field
(`phases.params` for an out-of-range `l` or `g`, as for every device parameter); and a built
mechanism's report equals the aggregator's reference for random sets and words (beyond the
shared vectors, which tests/test_device_vectors.py and tests/test_c_client.py replay).
"""
import json
import struct
import subprocess

import numpy as np
import pytest

from support.c_client import assert_no_sanitizer_report, build_client, client_env
from ldpfleet.provision import device_runner
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms import make_mechanism

W = 1 << 32
BIG = 1 << 24


def construction_cases():
    """(mechanism, eps_milli, d, params) around every limit of spec §3's psgrr/psolh rules."""
    out = []
    for name, extra in (("psgrr", {}), ("psolh", {"g": 4})):
        for l in (0, 1, 65536, 65537, -1):
            out.append((name, 1000, 10, dict(extra, l=l)))
        for d in (2, BIG, BIG + 1, 2 ** 32 - 1):
            out.append((name, 1000, d, dict(extra, l=2)))
        for cands in ([7], [1, 2, 3], [], [5, 5], [W - 1, 0], [W], [-1], [1, "2"]):
            out.append((name, 1000, 2 ** 32 - 1, dict(extra, l=2, candidates=cands)))
    for g in (1, 2, 65536, 65537):
        out.append(("psolh", 1000, 10, {"l": 1, "g": g}))
    # GRR over D + 1 outputs must be exactly eps-LDP with integer thresholds (spec §2)
    for eps, d in ((1, BIG - 1), (1, BIG), (1, 10 ** 6), (2000, 10 ** 6), (1, 4)):
        out.append(("psgrr", eps, d, {"l": 1}))
    return out


def aggregator_field(name, eps, d, params):
    try:
        make_mechanism(name, eps, d, salt=1, campaign_id=2, phase=1, **params)
    except ConfigError as exc:
        return "phases.params" if exc.field in ("l", "g") else exc.field
    return None


MP_SCRIPT = r'''
import json, sys
from ldp.mechanisms import make
from ldp.errors import ConfigError
with open(sys.argv[1]) as f:
    cases = json.load(f)
out = []
for name, eps, d, params in cases:
    try:
        make(name, eps, d, 1, 2, 1, params)
        out.append(None)
    except ConfigError as exc:
        out.append(exc.field)
with open(sys.argv[2], "w") as f:
    json.dump(out, f)
'''


def micropython_fields(tmp_path, cases):
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    (tmp_path / "build.py").write_text(MP_SCRIPT)
    proc = subprocess.run([device_runner.micropython_binary(), str(tmp_path / "build.py"),
                           str(tmp_path / "cases.json"), str(tmp_path / "out.json")],
                          env=device_runner.micropython_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / "out.json").read_text())


def c_vector(binary, case, words):
    proc = subprocess.run([str(binary), "vector", "--case", json.dumps(case), "--words-hex",
                           struct.pack("<%dI" % len(words), *words).hex()],
                          capture_output=True, text=True, env=client_env(), timeout=60)
    assert_no_sanitizer_report(proc.stderr)
    return proc


def c_fields(cases, sanitize=False):
    binary = build_client(sanitize=sanitize)
    out = []
    for name, eps, d, params in cases:
        case = {"mechanism": name, "eps_milli": eps, "domain_size": d, "salt": 1,
                "campaign_id": 2, "phase": 1, "params": params, "value": [1], "nonce": 3}
        proc = c_vector(binary, case, [0] * (3 if name == "psgrr" else 4))
        if proc.returncode == 0:
            out.append(None)
        else:
            assert proc.returncode == device_runner.EXIT_REFUSED, proc.stderr
            out.append(proc.stderr.split("ldp_client: ", 1)[1].split(":", 1)[0])
    return out


def test_construction_cases_cover_both_outcomes():
    want = [aggregator_field(*c) for c in construction_cases()]
    assert None in want and {"phases.params", "domain.size", "candidates"} <= set(want)


def test_micropython_builds_exactly_what_the_aggregator_builds(tmp_path):
    cases = construction_cases()
    assert micropython_fields(tmp_path, cases) == [aggregator_field(*c) for c in cases]


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
def test_c_client_builds_exactly_what_the_aggregator_builds(sanitize):
    cases = construction_cases()
    assert c_fields(cases, sanitize) == [aggregator_field(*c) for c in cases]


def random_jobs(seed=11, per_config=40):
    """Random sets (repeats, non-items, sizes 0..7) and words for a few configs of each."""
    rng = np.random.default_rng(seed)
    configs = [("psgrr", 700, 6, {"l": 3}), ("psgrr", 2500, 1000, {"l": 1}),
               ("psgrr", 1000, 5000, {"l": 4, "candidates": [9, 4000, 12, 77, 5]}),
               ("psolh", 700, 6, {"l": 2, "g": 3}), ("psolh", 4000, BIG, {"l": 5, "g": 56}),
               ("psolh", 1500, 5000, {"l": 2, "g": 5, "candidates": [9, 4000, 12]})]
    jobs = []
    for name, eps, d, params in configs:
        mech = make_mechanism(name, eps, d, salt=7, campaign_id=8, phase=2, **params)
        pool = [int(x) for x in mech.candidates[:6]] + [d + 3, 4001, W - 1]
        for i in range(per_config):
            raw = [int(x) for x in rng.choice(pool, size=int(rng.integers(0, 8)))]
            keys = list(dict.fromkeys(raw))
            words = [int(w) for w in rng.integers(0, W, size=mech.random_words, dtype=np.uint64)]
            jobs.append({"mechanism": name, "eps_milli": eps, "domain_size": d, "salt": 7,
                         "campaign_id": 8, "phase": 2, "params": params, "value": raw,
                         "nonce": i, "words": words,
                         "want": mech.reference_report(keys, words, i).hex()})
    return jobs


RANDOM_SCRIPT = r'''
import json, sys
from ldp.mechanisms import make
from word_source import WordSource
with open(sys.argv[1]) as f:
    jobs = json.load(f)
out = []
for j in jobs:
    mech = make(j["mechanism"], j["eps_milli"], j["domain_size"], j["salt"], j["campaign_id"],
                j["phase"], j["params"])
    src = WordSource(j["words"])
    out.append("".join("%02x" % b for b in mech.report(j["value"], j["nonce"], src)))
    assert src.pos == len(src.data)
with open(sys.argv[2], "w") as f:
    json.dump(out, f)
'''


def test_random_sets_equal_the_reference_on_both_clients(tmp_path):
    """Sets with repeated keys (the devices keep the first occurrence, as the aggregator's
    `one_set` of the distinct keys), keys outside the items, empty and long sets."""
    import shutil
    jobs = random_jobs()
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    (tmp_path / "run.py").write_text(RANDOM_SCRIPT)
    shutil.copy(device_runner.DEVICE_DIR / "tests" / "word_source.py", tmp_path / "word_source.py")
    proc = subprocess.run([device_runner.micropython_binary(), str(tmp_path / "run.py"),
                           str(tmp_path / "jobs.json"), str(tmp_path / "out.json")],
                          env=device_runner.micropython_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == [j["want"] for j in jobs]
    binary = build_client()
    for j in jobs:
        case = {k: v for k, v in j.items() if k not in ("words", "want")}
        proc = c_vector(binary, case, j["words"])
        assert proc.returncode == 0 and proc.stdout.strip() == j["want"], (j, proc.stderr)
