"""ε limits of both clients equal the spec's (§2: eps_milli in [1, 64000]).

* Thresholds at the bounds, against the aggregator's reference (`ldpfleet.core.protocol`): the C
  client's `thresholds` mode (E_full and E_half exactly, from big integers: E_full outgrows 128
  bits at eps ~ 44.36 and reaches 2^157 at 64) and the MicroPython client's `ldp.thresholds`,
  at 1, around 44.36, and up to 64000; outside [1, 64000] the C client refuses with the config
  field `phases.eps_milli`.
* Live, against a private Mosquitto: a campaign at eps_milli 64000 is reported and charged
  64000 by both clients; one at 64001 (and 0) is refused with `phases.eps_milli`, nothing
  published, nothing spent.
"""
import json
import subprocess

import pytest

from support.c_client import build_client, run_client
from support.devices import SIGNING_KEY, ReportCollector, config_doc, envelope
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger, run_device
from ldpfleet.core import protocol

BOUNDS = [1, 2, 999, 44361, 44362, 45000, 50000, 63999, protocol.MAX_EPS_MILLI]
NS = [2, 3, 7, 65537, (1 << 31) + 1, 1 << 32]

MICROPYTHON_THRESHOLDS = r'''
import json
import sys
from ldp import thresholds as t
out = []
for e in json.loads(sys.argv[1]):
    out.append({"eps_milli": e, "E_full": t.exp_lower(e, 1000), "E_half": t.exp_lower(e, 2000),
                "T_rr": t.t_rr(e), "T_oue_q": t.t_oue_q(e), "T_flip": t.t_flip(e),
                "T_grr": dict((str(n), t.t_grr(e, n)) for n in json.loads(sys.argv[2]))})
print(json.dumps(out))
'''


def reference(e):
    return {"eps_milli": e, "E_full": protocol.exp_lower(e, 1000),
            "E_half": protocol.exp_lower(e, 2000), "T_rr": protocol.t_rr(e),
            "T_oue_q": protocol.t_oue_q(e), "T_flip": protocol.t_flip(e),
            "T_grr": {str(n): protocol.t_grr(e, n) for n in NS}}


def test_bounds_have_teeth():
    """The bounds include values where E_full no longer fits 128 bits (the C client's old limit)."""
    assert protocol.exp_lower(44361, 1000) < 1 << 128 <= protocol.exp_lower(44362, 1000)
    assert protocol.exp_lower(protocol.MAX_EPS_MILLI, 1000) >= 1 << 156


@pytest.mark.parametrize("no_int128", [False, True], ids=["int128", "portable"])
def test_c_thresholds_at_the_bounds_equal_the_reference(no_int128):
    binary = build_client(no_int128=no_int128)
    for e in BOUNDS:
        argv = [str(binary), "thresholds", "--eps-milli", str(e)]
        for n in NS:
            argv += ["--n", str(n)]
        proc = subprocess.run(argv, capture_output=True, text=True)
        assert proc.returncode == 0, (e, proc.stdout, proc.stderr)
        got = json.loads(proc.stdout)
        want = reference(e)
        assert {k: got[k] for k in want} == want, e


@pytest.mark.parametrize("eps", [0, protocol.MAX_EPS_MILLI + 1, 10 ** 6])
def test_c_thresholds_refuse_outside_the_spec_range(eps):
    proc = subprocess.run([str(build_client()), "thresholds", "--eps-milli", str(eps)],
                          capture_output=True, text=True)
    assert proc.returncode == device_runner.EXIT_REFUSED
    assert proc.stdout.startswith("refused phases.eps_milli:"), proc.stdout


def test_micropython_thresholds_at_the_bounds_equal_the_reference(tmp_path):
    script = tmp_path / "thresholds.py"
    script.write_text(MICROPYTHON_THRESHOLDS)
    proc = subprocess.run([device_runner.micropython_binary(), str(script), json.dumps(BOUNDS),
                           json.dumps(NS)], env=device_runner.micropython_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout) == [reference(e) for e in BOUNDS]


def run_live(client, state, port, campaign):
    if client == "c":
        proc = run_client(build_client(), state, port, campaign, 3, wait=30)
        return proc.returncode, proc.stdout + proc.stderr
    proc = run_device(state, "127.0.0.1", port, campaign, value=3, wait=30)
    return proc.returncode, proc.stdout


@pytest.mark.parametrize("client", ["micropython", "c"])
@pytest.mark.parametrize("eps", [protocol.MAX_EPS_MILLI, protocol.MAX_EPS_MILLI + 1, 0])
def test_live_eps_bounds(mosquitto, tmp_path, client, eps):
    """A device whose own cap is the spec's limit reports a campaign at exactly that limit and
    refuses one above it (or at 0) with the config field, like the aggregator."""
    name = "eps-%s-%d" % (client, eps)
    doc = config_doc(name, mechanism="olh", eps_milli=protocol.MAX_EPS_MILLI, params={"g": 8})
    doc["phases"][0]["eps_milli"] = eps  # past make_config's own check for the refused ones
    state = device_runner.prepare_device(tmp_path / name, "dev-" + name, SIGNING_KEY,
                                         eps_cap_milli=protocol.MAX_EPS_MILLI,
                                         lifetime_budget_milli=10 ** 6)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/%s/config" % name, envelope(campaign_config.canonical(doc)))
        code, out = run_live(client, state, mosquitto.port, name)
        reports = collector.barrier()
    finally:
        collector.close()
    ledger = read_ledger(state)
    if eps == protocol.MAX_EPS_MILLI:
        assert code == 0, out
        assert len(reports) == 1 and ledger["spent_milli"] == eps, out
        campaign_config.mechanism_for_phase(doc, 1).check(reports[0][1])
    else:
        assert code == device_runner.EXIT_REFUSED, out
        assert "refused config phases.eps_milli:" in out, out
        assert reports == [] and ledger is None
