"""protocol_spec/v2/registry.json is the one source of mechanism ids, names and report sizes:
the tables generated from it (tools/gen_tables.py) and what reads them — the aggregator, the C
kernels and the C client, the MicroPython client, the CLI's choices — agree with it, and every
mechanism's report size and word count follow its formulas."""
import json
import re
import subprocess
from pathlib import Path

from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from ldpfleet.core import protocol
from ldpfleet.commands.simulate import MECHANISMS as SIMULATE_CHOICES
from ldpfleet.core.kernels import ffi, lib
from ldpfleet.core.mechanisms import MODULES, make_mechanism

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = json.loads((ROOT / "protocol_spec" / "v2" / "registry.json").read_text())
IDS = {name: m["id"] for name, m in REGISTRY["mechanisms"].items()}
SET_VALUED = {name for name, m in REGISTRY["mechanisms"].items() if m.get("set_valued")}


def test_aggregator_tables():
    assert protocol.MECHANISM_IDS == IDS
    assert set(MODULES) == set(IDS)
    assert campaign_config.SET_VALUED == SET_VALUED
    assert protocol.PROTOCOL_VERSION == REGISTRY["protocol"]
    assert protocol.HEADER_SIZE == REGISTRY["header"]["size"]
    assert protocol.MAX_EPS_MILLI == REGISTRY["limits"]["eps_milli_max"]
    assert set(SIMULATE_CHOICES) <= set(IDS)


def test_c_kernel_and_c_client_tables():
    for name, mid in IDS.items():
        assert lib.ldp_mechanism_id(name.encode()) == mid
        assert ffi.string(lib.ldp_mechanism_name(mid)).decode() == name
    header = "".join((ROOT / "c_kernels" / h).read_text()  # ids: generated, included by ldp_report.h
                     for h in ("ldp_report.h", "ldp_mechanism_ids.h"))
    defined = {m.group(1).lower(): int(m.group(2))
               for m in re.finditer(r"#define LDP_MECHANISM_ID_(\w+) (\d+)", header)}
    assert defined == IDS
    version = int(re.search(r"#define LDP_PROTOCOL_VERSION (\d+)", header).group(1))
    assert version == REGISTRY["protocol"]


def test_micropython_tables():
    script = ("import json\nfrom ldp import report, mechanisms\n"
              "ids = dict((n, report.mechanism_id(n)) for n in report.MECHANISMS.split())\n"
              "print(json.dumps({'ids': ids, 'names': list(mechanisms.NAMES),"
              " 'set_valued': list(mechanisms.SET_VALUED), 'version': report.VERSION}))\n")
    proc = subprocess.run([device_runner.micropython_binary(), "-c", script],
                          env=device_runner.micropython_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["ids"] == IDS and set(got["names"]) == set(IDS)
    assert set(got["set_valued"]) == SET_VALUED and got["version"] == REGISTRY["protocol"]


SAMPLE_PARAMS = {"grr": {}, "olh": {"g": 8}, "flh": {"g": 8, "kp": 16}, "oue": {},
                 "cms": {"k": 4, "m": 40}, "hcms": {"k": 4, "m": 32}, "sh": {"m": 64, "l": 3},
                 "srappor": {"l": 3, "candidates": [1, 2, 3, 4, 5]}, "lcm": {"k": 4, "m": 40},
                 "psgrr": {"l": 3, "candidates": [1, 2, 3]}, "psolh": {"l": 3, "g": 8},
                 "shc": {"m": 64, "l": 3}, "duchi": {}, "pm": {}, "hm": {"metrics": 12},
                 "sw": {"bins": 64, "window": 20}}
SAMPLE_PARAMS.update({"losue": {}, "lsue": {}, "lgrr": {}, "loloha": {"g": 5}, "lbitmean": {"s": 3}})
SAMPLE_PARAMS["pem"] = {"g": 8, "kp": 16, "levels": [8, 16]}  # spec §3.5


def sample_mechanisms():
    """(name, registry entry, params, phase, mechanism) of every mechanism in its phases (shc's
    phase 2 needs phase 1's eps: `eps1_milli`)."""
    for name, entry in REGISTRY["mechanisms"].items():
        params = SAMPLE_PARAMS[name]
        for phase in ((1, 2) if name == "shc" else (1,)):
            extra = {"eps1_milli": 700} if phase == 2 else {}
            yield name, entry, params, phase, make_mechanism(name, 1000, 100, salt=1, campaign_id=1,
                                                             phase=phase, **params, **extra)


def registry_value(formula: str, params: dict, phase: int, eps_milli: int = 1000) -> int:
    env = {"n": 100, "m": params.get("m", 0), "kc": len(params.get("candidates", [])),
           "phase": phase}
    # hm: k, the metrics per report, by the registry's own "sampled" rule
    sampled = REGISTRY["mechanisms"]["hm"]["sampled"].split("=", 1)[1]
    env["k"] = eval(sampled, {"__builtins__": {"max": max, "min": min}},  # noqa: S307
                    {"metrics": params.get("metrics", 1), "eps_milli": eps_milli})
    # the registry writes ceil(X/8) for bitmaps of X bits: ((X) + 7) // 8 in integers
    formula = re.sub(r"ceil\((.*)/8\)", r"(((\1) + 7) // 8)", formula)
    return int(eval(formula, {"__builtins__": {}}, env))  # noqa: S307 - the repo's own registry


def test_report_sizes_follow_the_registry_formulas():
    for name, entry, params, phase, mech in sample_mechanisms():
        body = mech.body_size
        assert body == registry_value(entry["body_bytes"], params, phase), (name, phase, body)


def test_hm_sizes_follow_the_sampled_rule():
    """hm's k = max(1, min(metrics, eps_milli // 2500)) metrics per report: body 6k, words 4k."""
    for eps_milli, metrics, k in [(1000, 12, 1), (5000, 12, 2), (7499, 12, 2), (64000, 12, 12),
                                  (64000, 1, 1), (2499, 64, 1)]:
        params = {"metrics": metrics}
        mech = make_mechanism("hm", eps_milli, 100, **params)
        assert mech.sampled == k
        for field, got in (("body_bytes", mech.body_size), ("random_words", mech.random_words)):
            assert got == registry_value(REGISTRY["mechanisms"]["hm"][field], params, 1,
                                         eps_milli), (eps_milli, metrics, field)


def test_random_words_follow_the_registry_formulas():
    """`random_words` of every mechanism and phase (shc: 4 in phase 1, 1 in phase 2)."""
    for name, entry, params, phase, mech in sample_mechanisms():
        assert mech.random_words == registry_value(entry["random_words"], params, phase), \
            (name, phase, entry["random_words"])
