"""Bad input on the command line gets one line on stderr naming what is wrong and exit code 2
(3 for an unreachable broker): never a traceback, a hang, or a silent wrong result."""
import json

import numpy as np
import pytest

from ldpfleet import cli
from ldpfleet.core import protocol
from ldpfleet.service import Store


def run(capsys, *args):
    """(exit code, stderr) of `ldpfleet ARGS` in this process; argparse errors included."""
    capsys.readouterr()
    try:
        code = cli.main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def last_line(err):
    return err.strip().splitlines()[-1]


@pytest.fixture
def key_file(tmp_path, capsys):
    path = tmp_path / "fleet.key"
    assert run(capsys, "campaign", "keygen", path)[0] == 0
    return path


@pytest.mark.parametrize("args, says", [
    (["simulate", "--mechanism", "grr", "--epsilon", "1e9", "--users", 200, "--domain", 10], "(0, 64]"),
    (["simulate", "--mechanism", "grr", "--epsilon", "inf", "--users", 200, "--domain", 10], "(0, 64]"),
    (["plan", "--epsilon", "nan", "--domain", 100, "--users", 1000], "(0, 64]"),
    (["plan", "--epsilon", 1e9, "--domain", 100, "--users", 1000], "(0, 64]"),
    (["plan", "--epsilon", 1, "--domain", 100, "--target-mse", 0], "target_mse"),
    (["plan", "--epsilon", 1, "--domain", 100, "--users", 10, "--report-bytes-max", 0], "report_bytes_max"),
    (["plan", "--epsilon", 1, "--domain", 1, "--users", 10], "domain"),
    (["broker-config", "--out", "x", "--aggregator-user", "a", "--devices-file", "d", "--port", 0], "port"),
    (["broker-config", "--out", "x", "--aggregator-user", "a", "--devices-file", "d", "--bind", "a b"],
     "host name"),
    (["serve", "--broker", "mqtt://127.0.0.1:1", "--state", "s.db", "--batch-size", 0], ">= 1"),
    (["serve", "--broker", "mqtt://127.0.0.1:1", "--state", "s.db", "--status-interval", -1], ">= 0"),
])
def test_numbers_out_of_range(capsys, args, says):
    code, err = run(capsys, *args)
    assert code == 2 and says in last_line(err), err


def test_state_file_that_is_not_a_database(capsys, tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 100)
    for state in (junk, tmp_path):
        code, err = run(capsys, "campaign", "list", "--state", state)
        assert code == 2 and last_line(err).startswith("ldpfleet: error: state file:"), err


def test_signing_key_files(capsys, tmp_path, mosquitto):
    """v1's HMAC fleet keys are refused with what to do instead; so are a public key, a
    non-Ed25519 key and garbage given as the private key, and a missing file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    hmac_key = tmp_path / "fleet.key"
    hmac_key.write_text("ab" * 32 + "\n")
    pub = tmp_path / "k.pub"
    assert run(capsys, "campaign", "keygen", tmp_path / "k")[0] == 0
    ecdsa = tmp_path / "ec.key"
    ecdsa.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    garbage = tmp_path / "garbage.key"
    garbage.write_bytes(b"-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    for path, says in [(hmac_key, "shared HMAC fleet key"), (pub, "not a PEM private key"),
                       (ecdsa, "not Ed25519"), (garbage, "garbage.key")]:
        code, err = run(capsys, "campaign", "create", "--broker", mosquitto.url, "--state",
                        tmp_path / "s.db", "--signing-key", path, "--name", "k", "--mechanism",
                        "grr", "--epsilon", 1, "--domain", 8)
        assert code == 2 and "signing_key" in err and says in err, (path, err)
    code, err = run(capsys, "campaign", "create", "--broker", mosquitto.url, "--state", tmp_path / "s.db",
                    "--signing-key", tmp_path / "missing.key", "--name", "k", "--mechanism", "grr",
                    "--epsilon", 1, "--domain", 8)
    assert code == 2 and "missing.key" in err, err


def test_campaign_create_refusals(capsys, tmp_path, key_file, mosquitto):
    base = ["campaign", "create", "--state", tmp_path / "s.db", "--signing-key", key_file,
            "--name", "c", "--mechanism", "grr", "--epsilon", 1]
    for extra, says in [
        (["--broker", "mqtt://127.0.0.1:0", "--domain", 8], "port 0"),
        (["--broker", "", "--domain", 8], "no host"),
        (["--broker", mosquitto.url, "--domain", 8, "--valid-days", 0], "valid_days"),
        (["--broker", mosquitto.url, "--domain", 8, "--valid-days", 1e9], "valid_days"),
        (["--broker", mosquitto.url, "--domain", tmp_path / "no-such-items.txt"], "no-such-items.txt"),
    ]:
        code, err = run(capsys, *base, *extra)
        assert code == 2 and says in last_line(err), (extra, err)
    code, err = run(capsys, "campaign", "create", "--state", tmp_path / "s.db", "--signing-key",
                    key_file, "--name", "p", "--protocol", "ldpminer-rappor", "--epsilon", 2,
                    "--domain", "0-31", "--set-size", 4, "--top", 2, "--broker", mosquitto.url,
                    "--valid-days", 0)
    assert code == 2 and "valid_days" in last_line(err), err
    assert json.loads(cli_out(capsys, "campaign", "list", "--state", tmp_path / "s.db", "--json")) == []


def test_estimate_arguments(capsys, tmp_path, key_file, mosquitto):
    state = tmp_path / "s.db"
    assert run(capsys, "campaign", "create", "--broker", mosquitto.url, "--state", state,
               "--signing-key", key_file, "--name", "e", "--mechanism", "grr", "--epsilon", 1,
               "--domain", 8)[0] == 0
    with Store("sqlite:///%s" % state) as store:  # 500 reports, so post-processing runs
        mech = store.require_campaign("e").mechanism(1)
        sketch = mech.new_sketch()
        rng = np.random.default_rng(1)
        sketch.update(mech.perturb_batch(rng.integers(0, 8, 500), rng))
        with store.batch():
            store.put_sketch("e", 1, sketch.n, sketch.serialize())
    for extra, says in [(["--top", 0], "top"), (["--top", -1], "top"),
                        (["--threshold", "nan"], "threshold"), (["--threshold", 2], "threshold"),
                        (["--post-opt", "alpha=1"], "need --post"),
                        (["--post", "base-cut", "--post-opt", "est=1"], "est"),
                        (["--post", "base-cut", "--post-opt", "bogus=1"], "bogus"),
                        (["--post", "nope"], "nope")]:
        code, err = run(capsys, "estimate", "e", "--state", state, *extra)
        assert code == 2 and says in last_line(err), (extra, err)


def test_phase2_refusals(capsys, tmp_path, key_file, mosquitto):
    """Phase-2 messages devices would refuse, or that would change an open phase 2, are
    refused before anything is stored or published; the same message again is re-published."""
    state = tmp_path / "s.db"
    assert run(capsys, "campaign", "create", "--broker", mosquitto.url, "--state", state,
               "--signing-key", key_file, "--name", "hh", "--protocol", "ldpminer-rappor",
               "--epsilon", 2, "--domain", "0-31", "--set-size", 4, "--top", 2)[0] == 0
    other_key = tmp_path / "other.key"
    run(capsys, "campaign", "keygen", other_key)
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"model": "x"}))
    p2 = ["campaign", "phase2", "hh", "--state", state, "--broker", mosquitto.url]
    for extra, says in [(["--candidates", "1,2", "--signing-key", other_key], "signing_key"),
                        (["--candidates", "1,99"], "candidates"),
                        (["--model-file", model], "model")]:
        code, err = run(capsys, *p2, *extra)
        assert code == 2 and says in last_line(err), (extra, err)
    status = json.loads(cli_out(capsys, "campaign", "status", "hh", "--state", state, "--json"))
    assert status["phase"] == 1
    assert run(capsys, *p2, "--candidates", "1,2")[0] == 0
    assert run(capsys, *p2, "--candidates", "1,2")[0] == 0  # the same message: re-published
    code, err = run(capsys, *p2, "--candidates", "3,4")
    assert code == 2 and "already open" in last_line(err), err


def cli_out(capsys, *args):
    capsys.readouterr()
    assert cli.main([str(a) for a in args]) == 0
    return capsys.readouterr().out


def test_flash_dry_run_refusals(capsys, tmp_path, key_file):
    base = ["flash", "--port", "/dev/null", "--device-id", "b1", "--trusted-keys", key_file,
            "--dry-run", "--march", "x64", "--stage-dir", tmp_path / "stage", "--broker-host", "h"]
    for extra, says in [(["--value", "1e999"], "value"), (["--campaign", "a/b"], "campaign"),
                        (["--budget", "nan"], "budget"), (["--eps-cap", 0], "epsilon"),
                        (["--broker-port", 99999], "port")]:
        code, err = run(capsys, *base, *extra)
        assert code == 2 and says in last_line(err), (extra, err)


def test_epsilon_bound_is_the_spec_constant():
    assert protocol.MAX_EPS_MILLI == 64000
    with pytest.raises(ValueError):
        protocol.t_rr(64001)
    assert protocol.t_rr(64000) < protocol.WORD
