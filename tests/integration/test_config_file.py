"""ldpfleet.toml and LDPFLEET_<NAME>: every subcommand's options from a config file
and the environment, precedence flag > env > file > default, values checked by the options'
own types (errors name file, section and key, exit 2), unknown keys and inline secrets refused,
and `ldpfleet config check` showing effective values and sources with secrets masked."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ldpfleet import cli
from ldpfleet.service.ingest.loop import IngestOptions, Ingestor
from ldpfleet.core.signing import write_signing_key
from support.service import report_messages

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No LDPFLEET_* option variables from the caller's shell, and a cwd without ldpfleet.toml."""
    for name in list(os.environ):
        if name.startswith("LDPFLEET_") and not name.startswith("LDPFLEET_TEST"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def run(capsys, *argv):
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def check(capsys, *argv):
    code, out, err = run(capsys, "config", "check", "--json", *argv)
    assert code == 0, err
    return json.loads(out)


def write(path, text):
    path.write_text(text)
    return str(path)


def cli_proc(*argv, env=None, cwd=None):
    base = {k: v for k, v in os.environ.items() if not k.startswith("LDPFLEET_")}
    return subprocess.run([sys.executable, "-m", "ldpfleet.cli"] + [str(a) for a in argv],
                          capture_output=True, text=True, timeout=120, cwd=cwd,
                          env=dict(base, **(env or {})))


def test_precedence_flag_env_file_default(tmp_path, monkeypatch, capsys):
    conf = write(tmp_path / "c.toml", """
state = "sqlite:///common.db"
[serve]
batch-size = 5000
batch_ms = 100
session_expiry = 88
[campaign.list]
state = "sqlite:///list.db"
[estimate]
top = 3
post_opt = ["a=1", "b=2"]
""")
    monkeypatch.setenv("LDPFLEET_BATCH_MS", "50")
    monkeypatch.setenv("LDPFLEET_SESSION_EXPIRY", "77")
    monkeypatch.setenv("LDPFLEET_CONFIDENCE", "0.9")
    serve = check(capsys, "--config", conf, "serve", "--session-expiry", "99")
    assert serve["config_file"] == conf
    rows = serve["commands"]["serve"]
    assert rows["batch_size"] == {"value": 5000, "source": "file",
                                  "from": "%s [serve] batch-size" % conf}
    assert rows["batch_ms"] == {"value": 50.0, "source": "env", "from": "LDPFLEET_BATCH_MS"}
    assert rows["session_expiry"] == {"value": 99, "source": "flag"}
    assert rows["max_packet_bytes"] == {"value": 1 << 20, "source": "default"}
    assert rows["state"]["value"] == "sqlite:///common.db" and rows["state"]["source"] == "file"

    est = check(capsys, "--config", conf, "estimate", "NAME", "--post-opt", "c=3")["commands"]
    rows = est["estimate"]
    assert rows["top"]["value"] == 3 and rows["top"]["source"] == "file"
    assert rows["confidence"] == {"value": 0.9, "source": "env", "from": "LDPFLEET_CONFIDENCE"}
    assert rows["post_opt"] == {"value": ["c=3"], "source": "flag"}  # a flag replaces the list
    assert rows["phase"] == {"value": None, "source": "default"}

    every = check(capsys, "--config", conf)["commands"]  # all commands, no flags
    assert every["campaign list"]["state"]["value"] == "sqlite:///list.db"  # [campaign.list]
    assert every["campaign status"]["state"]["value"] == "sqlite:///common.db"  # top level
    assert every["estimate"]["post_opt"]["value"] == ["a=1", "b=2"]
    assert every["serve"]["session_expiry"]["value"] == 77


def test_file_and_env_values_reach_the_commands(tmp_path, monkeypatch, capsys, mosquitto):
    """campaign create with --state, --broker, --signing-key and the required --mechanism/
    --protocol choice all from the file; `campaign list` finds ./ldpfleet.toml; estimate takes
    --top from the environment, a flag beats it."""
    key = str(tmp_path / "sign.key")
    write_signing_key(key)
    state = "sqlite:///" + str(tmp_path / "pilot.db")
    conf = write(tmp_path / "ldpfleet.toml", """
state = "%s"
[campaign]
broker = "%s"
[campaign.create]
signing-key = "%s"
mechanism = "olh"
epsilon = 2
domain = "0-31"
""" % (state, mosquitto.url, key))
    monkeypatch.setenv("LDPFLEET_CONFIG", conf)
    code, out, err = run(capsys, "campaign", "create", "--name", "pilot", "--json")
    assert code == 0, err
    assert json.loads(out)["campaign"] == "pilot"
    monkeypatch.delenv("LDPFLEET_CONFIG")  # now found as ./ldpfleet.toml (cwd is tmp_path)
    code, out, err = run(capsys, "campaign", "list", "--json")
    assert code == 0, err
    assert [r["campaign"] for r in json.loads(out)] == ["pilot"]

    from ldpfleet.service import Store
    rng = np.random.default_rng(5)
    with Store(state) as store:
        mech = store.require_campaign("pilot").mechanism(1)
    ingestor = Ingestor(state, options=IngestOptions(client_id="cfg"))
    try:
        ingestor.process_batch(report_messages("pilot", mech.perturb_batch(
            rng.integers(0, 32, 400), rng)))
    finally:
        ingestor.store.close()
    monkeypatch.setenv("LDPFLEET_TOP", "3")
    monkeypatch.setenv("LDPFLEET_JSON", "yes")
    code, out, err = run(capsys, "estimate", "pilot")
    assert code == 0, err
    assert json.loads(out)["n"] == 400 and len(json.loads(out)["items"]) == 3
    code, out, err = run(capsys, "estimate", "pilot", "--top", "5")
    assert code == 0, err
    assert len(json.loads(out)["items"]) == 5

    # the same through a real process, the file named by --config after the command
    proc = cli_proc("campaign", "list", "--config", conf, "--json", cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr
    assert [r["campaign"] for r in json.loads(proc.stdout)] == ["pilot"]


@pytest.mark.parametrize("body, named, says", [
    ("[serve]\nbatch_size = 0\n", "[serve] batch_size", "an integer >= 1, got '0'"),
    ("[serve]\nmqtt = 3\n", "[serve] mqtt", "invalid choice"),
    ("[estimate]\ntop = \"many\"\n", "[estimate] top", "invalid int value: 'many'"),
    ("[estimate]\njson = \"maybe\"\n", "[estimate] json", "true or false"),
    ("[serve]\nbatchsize = 10\n", "[serve] batchsize", "unknown option"),
    ("[estimate]\nbatch_size = 10\n", "[estimate] batch_size", "unknown option"),
    ("[serv]\nbatch_size = 10\n", "[serv]", "unknown section"),
    ("[campaign.creat]\nname = \"x\"\n", "[campaign.creat]", "unknown section"),
    ("password = \"hunter2\"\n", "[common] password", "password_file"),
    ("[serve]\npassword = \"hunter2\"\n", "[serve] password", "password_file"),
    ("[serve\n", "", "not valid TOML"),
    ("state = \"postgresql://u:hunter2@db/ldp\"\n", "[common] state", "carries a password"),
    ("state = \"postgresql://u@db/ldp?password=hunter2\"\n", "[common] state", "carries a password"),
])
def test_bad_file_exits_2_naming_file_section_and_key(tmp_path, body, named, says):
    conf = write(tmp_path / "bad.toml", body)
    proc = cli_proc("--config", conf, "campaign", "list", "--state", str(tmp_path / "s.db"))
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, line
    assert line.startswith(("ldpfleet: error: %s %s" % (conf, named)).strip()), line
    assert says in line, line
    assert "hunter2" not in line


def test_missing_config_file_is_an_error(tmp_path, monkeypatch, capsys):
    code, _, err = run(capsys, "--config", tmp_path / "nope.toml", "campaign", "list")
    assert code == 2 and "nope.toml does not exist" in err
    monkeypatch.setenv("LDPFLEET_CONFIG", str(tmp_path / "gone.toml"))
    code, _, err = run(capsys, "config", "check")
    assert code == 2 and "gone.toml does not exist" in err


def test_bad_env_value_fails_only_the_command_that_has_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LDPFLEET_TOP", "x")
    code, _, err = run(capsys, "estimate", "c", "--state", tmp_path / "none.db")
    assert code == 2 and "LDPFLEET_TOP: invalid int value: 'x'" in err
    code, _, err = run(capsys, "campaign", "list", "--state", tmp_path / "none.db")
    assert code == 2 and "no state file" in err  # list has no --top: the variable is not its
    code, out, err = run(capsys, "config", "check", "--json", "estimate")
    assert code == 2 and "LDPFLEET_TOP" in err
    assert json.loads(out)["commands"]["estimate"]["top"]["error"]


def test_secrets_are_masked_and_password_files_checked(tmp_path, monkeypatch, capsys):
    pw = tmp_path / "agg.pw"
    pw.write_text("s3cret\n")
    conf = write(tmp_path / "c.toml", """
[serve]
password_file = "%s"
[broker-check]
password_file = "%s"
""" % (pw, tmp_path / "missing.pw"))
    # a URL with a password is refused in the file (test_bad_file_...), shown masked from env
    monkeypatch.setenv("LDPFLEET_BROKER", "mqtts://agg:urlsecret@broker.example:8883")
    rows = check(capsys, "--config", conf)["commands"]
    assert rows["serve"]["password_file"] == {
        "value": str(pw), "source": "file", "readable": True,
        "from": "%s [serve] password_file" % conf}
    assert rows["broker-check"]["password_file"]["readable"] is False
    assert rows["serve"]["broker"]["value"] == "mqtts://agg:****@broker.example:8883"
    code, out, _ = run(capsys, "config", "check", "--config", conf, "serve", "--password", "flagpw")
    assert code == 0 and "flagpw" not in out and "****" in out and "urlsecret" not in out

    # LDPFLEET_PASSWORD (read by the commands themselves) beats the file's password_file
    monkeypatch.setenv("LDPFLEET_PASSWORD", "envsecret")
    code, out, _ = run(capsys, "config", "check", "--json", "--config", conf, "serve")
    assert "envsecret" not in out and "s3cret" not in out
    rows = json.loads(out)["commands"]["serve"]
    assert rows["password"] == {"value": "****", "source": "env", "from": "LDPFLEET_PASSWORD"}
    assert rows["password_file"]["source"] == "default"
    # ... and a password file from the environment beats the file's
    monkeypatch.setenv("LDPFLEET_PASSWORD_FILE", str(tmp_path / "other.pw"))
    rows = check(capsys, "--config", conf, "serve")["commands"]["serve"]
    assert rows["password_file"]["source"] == "env"
    assert rows["password_file"]["value"] == str(tmp_path / "other.pw")


def test_password_file_from_the_file_reaches_the_login(tmp_path):
    """The existing --password-file handling reads the file's password_file (exit 2 naming it
    when it is unreadable, before any connection)."""
    conf = write(tmp_path / "c.toml", '[campaign.close]\nbroker = "mqtt://127.0.0.1:1"\n'
                 'username = "admin"\npassword_file = "%s"\n' % (tmp_path / "nope.pw"))
    proc = cli_proc("--config", conf, "campaign", "close", "x", "--state", tmp_path / "s.db")
    assert proc.returncode == 2 and "password_file" in proc.stderr, proc.stderr


def test_text_output_and_help(tmp_path, capsys):
    conf = write(tmp_path / "c.toml", "[serve]\nbatch_size = 10\n")
    code, out, _ = run(capsys, "config", "check", "--config", conf, "serve")
    assert code == 0 and out.startswith("config file: %s" % conf)
    assert "[serve]" in out and "batch_size" in out and "file %s [serve] batch_size" % conf in out
    assert "required: give it on the command line" in out  # --broker and --state are required and not set
    proc = cli_proc("--help")
    assert "--config FILE" in proc.stdout and "LDPFLEET_" in proc.stdout


def test_deploy_example_is_accepted_key_by_key(capsys):
    """Every key of deploy/ldpfleet.toml is an option of its section's commands."""
    import tomllib
    path = ROOT / "deploy" / "ldpfleet.toml"
    with open(path, "rb") as f:
        data = tomllib.load(f)
    rows = check(capsys, "--config", path)["commands"]

    def walk(section, table):
        for key, value in table.items():
            if isinstance(value, dict):
                walk(section + (key,), value)
                continue
            dest = key.replace("-", "_")
            if dest == "signing_key":
                dest = "signing_key_file"
            hits = [cmd for cmd in rows if tuple(cmd.split()[:len(section)]) == section
                    and rows[cmd].get(dest, {}).get("source") == "file"]
            assert hits, (section, key)

    walk((), data)


def two_campaigns(tmp_path) -> str:
    """A state with `cpu` (OLH, one phase) and `hh` (LDPMiner in phase 2), folded in process."""
    from ldpfleet.service import Store, create_campaign
    from ldpfleet.service.campaigns.protocols import (
        ProtocolOptions,
        advance_campaign,
        create_protocol_campaign)
    key = str(tmp_path / "k.key")
    write_signing_key(key)
    state = "sqlite:///" + str(tmp_path / "two.db")
    rng = np.random.default_rng(4)
    with Store(state) as store:
        cpu = create_campaign(store, None, key, "cpu", "olh", 2.0, "0-63")
        hh = create_protocol_campaign(store, None, key, "hh", "ldpminer-rappor", 6.0, "64",
                                      ProtocolOptions(set_size=4, top=3))
    sets = [sorted({3, 9} | set((rng.zipf(1.5, 2) % 64).tolist())) for _ in range(400)]
    ingestor = Ingestor(state, options=IngestOptions(client_id="fold"))
    try:
        ingestor.process_batch(report_messages("cpu", cpu.mechanism(1).perturb_batch(
            (rng.zipf(1.3, 400) % 64).astype(np.uint32), rng), "c-"))
        ingestor.process_batch(report_messages("hh", hh.mechanism(1).perturb_batch(sets, rng), "h-"))
        with Store(state) as store:
            advance_campaign(store, None, "hh")
            phase2 = store.require_campaign("hh").mechanism(2)
        ingestor.process_batch(report_messages("hh", phase2.perturb_batch(sets, rng), "h-"))
    finally:
        ingestor.store.close()
    return state


def test_sample_config_post_leaves_two_phase_answers_working(tmp_path, monkeypatch, capsys):
    """deploy/ldpfleet.toml's `[estimate] post = "norm-sub"` made every two-phase answer exit 2
    and nothing cleared it. Now the answer ignores a post-processing method with a warning,
    `--post none` and an empty LDPFLEET_POST clear the file's value (the one-phase table is
    then raw), and a flag still beats the environment."""
    state = two_campaigns(tmp_path)
    conf = ROOT / "deploy" / "ldpfleet.toml"

    def estimate(name, *extra):
        code, out, err = run(capsys, "--config", conf, "estimate", name, "--state", state,
                             "--json", *extra)
        assert code == 0, err
        return json.loads(out), err

    answer, err = estimate("hh")
    assert answer["protocol"] == "ldpminer-rappor" and answer["items"]
    assert "post-processing norm-sub applies to one phase's estimates" in err
    assert any("norm-sub" in w for w in answer["warnings"])
    table, err = estimate("cpu")
    assert table["post"] == "norm-sub" and "post" in table["items"][0]
    answer, err = estimate("hh", "--post", "none")
    assert "post-processing" not in err and not any("norm-sub" in w for w in answer["warnings"])
    table, _ = estimate("cpu", "--post", "none")
    assert table["post"] is None and "post" not in table["items"][0]

    monkeypatch.setenv("LDPFLEET_POST", "")
    answer, err = estimate("hh")
    assert "post-processing" not in err
    table, _ = estimate("cpu")
    assert table["post"] is None
    row = check(capsys, "--config", conf, "estimate")["commands"]["estimate"]["post"]
    assert row["value"] is None and row["source"] == "env"
    assert row["from"].startswith("LDPFLEET_POST= (empty: clears")
    table, _ = estimate("cpu", "--post", "norm")  # a flag beats the environment
    assert table["post"] == "norm"
    monkeypatch.setenv("LDPFLEET_POST", "norm-sub")
    table, _ = estimate("cpu", "--post", "none")
    assert table["post"] is None


def test_config_check_shows_tls_an_mqtts_url_implies(capsys):
    """`config check serve` printed `tls = false` for the sample's mqtts:// broker; serve runs
    with TLS there (mqtt.uses_tls, the rule BrokerSettings.from_url applies)."""
    rows = check(capsys, "--config", ROOT / "deploy" / "ldpfleet.toml", "serve")["commands"]["serve"]
    assert rows["tls"] == {"value": True, "source": "implied",
                           "from": "broker mqtts://broker.pilot.internal:8883"}
    plain = check(capsys, "serve", "--broker", "mqtt://h:1883")["commands"]["serve"]
    assert plain["tls"]["value"] is False
