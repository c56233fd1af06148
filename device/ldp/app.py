"""ldpfleet device entry point (device/main.py runs `main(sys.argv[1:])`).

On a board (no arguments): reads identity.json {device_id, trusted_keys, eps_cap_milli,
lifetime_budget_milli, broker: {host, port, user, password, tls: {ca_file, cert_file,
key_file}}, wifi: {ssid,
password}} and value.json {campaign, value, high} from the filesystem root and runs forever.
With `broker.tls` the device connects over TLS (port 8883 unless given) and accepts only a
broker certificate signed by the CA in `ca_file` (PEM or DER, relative to the state
directory) whose name matches the broker host.

On the unix port:
  micropython main.py --state DIR [--host H] [--port P] [--campaign C] [--value JSON]
                      [--high] [--once] [--timeout S] [--keepalive S] [--backoff-max S]
                      [--ca-file PATH]
A recurring campaign (spec §3.4) runs round after round; `--once` exits 0 after `rounds-done`.
Exit codes: 0 done, 1 missing or corrupt ledger (the device stops rather than reset its
budget; `ldpfleet flash` provisions it), 2 config refused (--once) or unusable CA file, 3 timed out
(--once).
"""
import json

from .device import Device, join
from .errors import LedgerCorrupt, LedgerMissing
from .session import Session

USAGE = "usage: main.py --state DIR [--host H] [--port P] [--campaign C] [--value JSON] " \
        "[--high] [--once] [--timeout S] [--keepalive S] [--backoff-max S] [--ca-file PATH]"
EXIT_BAD_CA = 2
EXIT_CORRUPT_LEDGER = 1
FLAGS = ("--once", "--high")


def parse_args(argv):
    opts = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(USAGE)
            raise SystemExit(0)
        if a in FLAGS:
            opts[a[2:]] = True
            i += 1
        elif a.startswith("--") and i + 1 < len(argv):
            opts[a[2:].replace("-", "_")] = argv[i + 1]
            i += 2
        else:
            raise SystemExit(USAGE)
    return opts


def load(path):
    with open(path) as f:
        return json.load(f)


def wifi(identity):
    """Join the Wi-Fi named in identity.json on boards that have `network`."""
    conf = identity.get("wifi")
    if not conf:
        return
    import network
    import time
    sta = network.WLAN(network.STA_IF)
    sta.active(True)
    if not sta.isconnected():
        sta.connect(conf["ssid"], conf["password"])
        for _ in range(300):
            if sta.isconnected():
                break
            time.sleep_ms(100)


def _read_bytes(state, path):
    with open(path if path.startswith("/") else join(state, path), "rb") as f:
        return f.read()


def tls_settings(state, broker, opts):
    """The SSLContext for the broker, or None for plain TCP; raises OSError/ValueError when
    the CA file (or the client certificate and key: `tls.cert_file`, `tls.key_file`, DER, a
    certificate from the fleet CA whose CN is the device id) cannot be read or parsed."""
    tls = broker.get("tls", {})
    ca_file = opts.get("ca_file", tls.get("ca_file"))
    if ca_file is None:
        return None
    from .mqtt import tls_context
    ctx = tls_context(_read_bytes(state, ca_file))
    if tls.get("cert_file") or tls.get("key_file"):
        if not (tls.get("cert_file") and tls.get("key_file")):
            raise ValueError("tls needs both cert_file and key_file")
        ctx.load_cert_chain(_read_bytes(state, tls["cert_file"]), _read_bytes(state, tls["key_file"]))
    return ctx


def main(argv):
    opts = parse_args(argv)
    state = opts.get("state", "")
    identity = load(join(state, "identity.json"))
    try:
        value_doc = load(join(state, "value.json"))
    except OSError:
        value_doc = {}
    if "value" in opts:
        try:
            value_doc["value"] = json.loads(opts["value"])
        except ValueError:
            value_doc["value"] = opts["value"]
    if isinstance(value_doc.get("value"), str):  # a strings campaign's value (spec §3.5)
        from .strings import join_surrogates
        value_doc["value"] = join_surrogates(value_doc["value"])
    broker = identity.get("broker", {})
    try:
        ssl = tls_settings(state, broker, opts)
    except (OSError, ValueError) as exc:
        print("ldp %s refused ca_file %r" % (identity.get("device_id"), exc))
        return EXIT_BAD_CA
    wifi(identity)
    timeout = opts.get("timeout")
    try:
        where = (opts.get("host", broker.get("host", "127.0.0.1")),
                 int(opts.get("port", broker.get("port", 8883 if ssl else 1883))))
        link = {"keepalive": int(opts.get("keepalive", 30)),
                "backoff_max": float(opts.get("backoff_max", 30)),
                "run_for": float(timeout) if timeout is not None else None}
        device = Device(state, identity, opts.get("campaign", value_doc.get("campaign")),
                        value_doc.get("value"), high=opts.get("high", value_doc.get("high", False)),
                        once=opts.get("once", False))
    except (LedgerCorrupt, LedgerMissing) as exc:
        print("ldp %s stopped %s" % (identity.get("device_id"), exc))
        return EXIT_CORRUPT_LEDGER
    except ValueError as exc:  # a malformed device id, campaign name or number in the options
        print("ldp %s refused %s" % (identity.get("device_id"), exc))
        return EXIT_BAD_CA
    return Session(device, where[0], where[1], user=broker.get("user"),
                   password=broker.get("password"), ssl=ssl, **link).run()
