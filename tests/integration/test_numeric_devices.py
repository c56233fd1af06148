"""The numeric mechanisms on both device clients (spec §3.3, §7.1), beyond the shared vectors.

* Parameters: the MicroPython client and the C client refuse the same numeric mechanism
  parameters with the same field (and the aggregator refuses them too).
* Same work for every value: on MicroPython a report consumes the same words and allocates the
  same heap whatever the grid point(s), from the first to the last (hm: every vector of them).
"""
import json
import subprocess

import pytest

from support.c_client import build_client, client_env
from ldpfleet.provision import device_runner
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms import make_mechanism

PARAM_CASES = [
    ("duchi", 1000, 1251, {}), ("duchi", 1000, 1, {}), ("duchi", 1000, 65537, {}),
    ("pm", 1000, 2, {}), ("pm", 64000, 65536, {}), ("pm", 1000, 65537, {}),
    ("sw", 1000, 65536, {"bins": 256, "window": 131}), ("sw", 1000, 100, {"bins": 101, "window": 5}),
    ("sw", 1000, 100, {"bins": 100, "window": 201}), ("sw", 1000, 100, {"bins": 100, "window": 200}),
    ("sw", 1000, 5000, {"bins": 1, "window": 1}), ("sw", 1000, 5000, {"bins": 1025, "window": 1}),
    ("sw", 1000, 5000, {"bins": 2, "window": 0}), ("sw", 1000, 5000, {"window": 3}),
    ("sw", 1000, 5000, {"bins": 8}), ("sw", 1000, 5000, {"bins": "8", "window": 3}),
    ("hm", 1000, 1001, {"metrics": 10}), ("hm", 1000, 1001, {}), ("hm", 64000, 3, {"metrics": 64}),
    ("hm", 1000, 1001, {"metrics": 0}), ("hm", 1000, 1001, {"metrics": 65}),
    ("hm", 1000, 1001, {"metrics": True}), ("hm", 1000, 1, {"metrics": 2}),
]

MP_PARAMS = r'''
import json, sys
from ldp.mechanisms import make
from ldp.errors import ConfigError
out = []
with open(sys.argv[1]) as f:
    cases = json.load(f)
for name, eps, n, params in cases:
    try:
        make(name, eps, n, 1, 2, 1, params)
        out.append(None)
    except ConfigError as exc:
        out.append(exc.field)
print(json.dumps(out))
'''


def c_field(binary, name, eps, n, params):
    """The C client's refusal field for a mechanism (None if it builds)."""
    case = {"mechanism": name, "eps_milli": eps, "domain_size": n, "salt": 1, "campaign_id": 2,
            "phase": 1, "params": params, "value": 0, "nonce": 0}
    proc = subprocess.run([str(binary), "vector", "--case", json.dumps(case), "--words-hex", ""],
                          capture_output=True, text=True, env=client_env(), timeout=60)
    if proc.returncode == 2 and proc.stderr.startswith("ldp_client: "):
        return proc.stderr[len("ldp_client: "):].split(":", 1)[0]
    return None


def test_parameter_refusals_agree(tmp_path):
    script = tmp_path / "params.py"
    script.write_text(MP_PARAMS)
    cases = tmp_path / "cases.json"  # a long argv string kills the unix port ("uncaught NLR")
    cases.write_text(json.dumps(PARAM_CASES))
    proc = subprocess.run([device_runner.micropython_binary(), str(script), str(cases)],
                          env=device_runner.micropython_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    micropython = json.loads(proc.stdout)
    binary = build_client()
    fields = []
    for case, mp in zip(PARAM_CASES, micropython):
        name, eps, n, params = case
        assert c_field(binary, name, eps, n, params) == mp, case
        try:  # the aggregator: the config rule (sw spells out bins and window), then the mechanism
            if name == "sw" and not {"bins", "window"} <= set(params):
                raise ConfigError("phases.params", "sw needs bins and window")
            make_mechanism(name, eps, n, **params)
            refused = False
        except (ConfigError, ValueError):
            refused = True
        assert refused == (mp is not None), case
        fields.append(mp)
    assert None in fields and {"domain.points", "params.bins", "phases.params"} <= set(fields)


MP_WORK = r'''
import gc, json, sys
from ldp.mechanisms import make
sys.path.append(sys.argv[2])
from word_source import WordSource
out = {}
with open(sys.argv[1]) as f:
    cases = json.load(f)
for name, eps, n, params, values in cases:
    mech = make(name, eps, n, 1, 2, 1, params)
    words = [(0x9E3779B9 * (i + 1)) & 0xFFFFFFFF for i in range(mech.words)]
    rows = []
    for v in values:
        mech.report(v, 0, WordSource(words))   # warm up (first-call allocations)
        src = WordSource(words)
        gc.collect()
        before = gc.mem_alloc()
        mech.report(v, 0, src)
        rows.append([gc.mem_alloc() - before, src.pos])
    out[name] = rows
print(json.dumps(out))
'''


@pytest.mark.parametrize("source", ["py", "mpy"])
def test_micropython_work_does_not_depend_on_the_value(tmp_path, source):
    """Each numeric mechanism, one set of words, grid points from the first to the last (hm with
    10 metrics: vectors of them): the words consumed and the heap allocated by a report are
    the same for every value."""
    n = 1251
    cases = [["duchi", 1000, n, {}, [0, 1, 625, n - 2, n - 1]],
             ["pm", 1000, n, {}, [0, 1, 625, n - 2, n - 1]],
             ["sw", 1000, 65536, {"bins": 256, "window": 131}, [0, 255, 256, 32768, 65535]],
             ["hm", 1000, n, {"metrics": 10}, [[0] * 10, [n - 1] * 10, list(range(0, 1000, 100)),
                                              [n - 1 - i for i in range(10)]]],
             ["hm", 8000, n, {"metrics": 10}, [[0] * 10, [n - 1] * 10, list(range(0, 1000, 100))]]]
    lib = device_runner.DEVICE_DIR if source == "py" else device_runner.compile_mpy(tmp_path / "mpy")
    script = tmp_path / "work.py"
    script.write_text(MP_WORK)
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    proc = subprocess.run([device_runner.micropython_binary(), str(script), str(tmp_path / "cases.json"),
                           str(device_runner.DEVICE_DIR / "tests")],
                          env=device_runner.micropython_env(lib), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(proc.stdout)
    for name, rows in got.items():
        assert len({tuple(r) for r in rows}) == 1, (name, rows)
