"""`ldpfleet fleet` (load generator), `ldpfleet demo` (everything on one machine) and
`ldpfleet broker-config` (a secured Mosquitto config with a per-device ACL)."""
import json
import os
import sys

from . import (add_password_args, host_address, non_negative, positive_int, resolve_password,
               tcp_port)


def register(subparsers):
    p = subparsers.add_parser(
        "fleet", help="simulate a fleet of devices reporting to a campaign (load generator)",
        description="Read and verify a campaign's signed config from the broker, then publish one "
                    "report per device: N simulated devices (C kernels), M real MicroPython "
                    "device processes and C C-client processes. Prints what was sent and the true "
                    "per-item counts.")
    p.add_argument("--broker", required=True, help="mqtt://HOST:PORT or mqtts://HOST:PORT (TLS)")
    p.add_argument("--cafile", default=None,
                   help="CA certificate (PEM) that signed the broker's; implies TLS and is given "
                        "to the MicroPython and C devices as their identity's broker.tls.ca_file")
    p.add_argument("--campaign", required=True)
    p.add_argument("--devices", type=int, default=1000, help="simulated CPython devices")
    p.add_argument("--micropython", type=int, default=0, help="real MicroPython device processes")
    p.add_argument("--c-clients", type=int, default=0, help="C client processes (device/c_client)")
    p.add_argument("--c-client", default=None, metavar="PATH",
                   help="C client binary (default: device/c_client/build/ldp_client, or ldp_client on PATH)")
    p.add_argument("--rate", type=float, default=None, help="publishes per second (default: unlimited)")
    p.add_argument("--ack-wait", type=float, default=120.0, metavar="S",
                   help="campaigns with acknowledgements (spec §6): each simulated device re-sends "
                        "its unacknowledged report on its own timer (retry_s x U[0.5, 1.5), "
                        "doubling), for up to S seconds after the last first publish (default 120); "
                        "progress goes to stderr every few seconds")
    p.add_argument("--ack-key", default=None, metavar="FILE",
                   help="the fleet's ack root key (serve's --ack-key): simulated devices take only "
                        "acks MAC'd under their keys (spec §6), real devices are provisioned with "
                        "theirs; without a key the plain 12 bytes of an ack are checked")
    p.add_argument("--ack-login-key", default=None, metavar="FILE",
                   help="instead of the root key, the key of this generator's --username login "
                        "(`ldpfleet ack-key login`): enough to check its simulated devices' acks")
    p.add_argument("--dist", default="zipf:1.1",
                   help="zipf:S over the domain, or FILE with one `item [weight]` per line")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the simulator's item draws and perturbation words and of the "
                        "device ids (default: the campaign's id, so a re-run against the same "
                        "campaign re-sends the same devices' reports, counted as duplicates; "
                        "another seed simulates other devices)")
    p.add_argument("--trusted-keys", required=True, metavar="FILE",
                   help="the public key(s) that sign the campaign (PATH.pub of `campaign keygen "
                        "PATH`); the load generator verifies the config as devices do")
    p.add_argument("--phase", type=int, default=None, help="phase to report in (default: the "
                   "campaign's current phase from its status topic, else 1)")
    p.add_argument("--id-prefix", default=None,
                   help="prefix of simulated device ids (default sim<seed>)")
    p.add_argument("--workdir", default=None, metavar="DIR",
                   help="where the real devices (--micropython, --c-clients) keep their state: "
                        "identity, value, ledger (default: $XDG_CACHE_HOME or ~/.cache, "
                        "ldpfleet/fleet/<broker>/<campaign>, mode 0700, so a re-run re-sends their "
                        "memoised reports)")
    p.add_argument("--device-logins", default=None, metavar="CSV",
                   help="broker logins of the real devices (--micropython, --c-clients): the "
                        "device rows of broker-config's credentials.csv; needed with --username "
                        "(each device logs in as itself)")
    p.add_argument("--max-inflight", type=int, default=2000,
                   help="bound on the simulated devices' un-acknowledged QoS 1 publishes (default "
                        "2000; at most 65000: MQTT packet ids are 16-bit)")
    p.add_argument("--set-size", type=int, default=None,
                   help="items per device for set-valued mechanisms (default: the campaign's "
                        "set length, the largest l of its phases and fallback: LDPMiner's and "
                        "svim's --set-size)")
    p.add_argument("--username", default=None,
                   help="broker login L of the generator (all simulated devices share one "
                        "connection and publish as ldp/<campaign>/r/L/<id>: under a "
                        "broker-config ACL use its --loadgen-user); real devices need "
                        "--device-logins")
    add_password_args(p)
    p.add_argument("--json", action="store_true",
                   help="print a JSON summary (sent, per kind, the most common true items)")
    p.add_argument("--true-counts", default=None, metavar="FILE",
                   help="write every true count and device id as JSON to FILE (the data to "
                        "score estimates against; megabytes for a large fleet)")
    p.add_argument("--progress", action="store_true", help="progress bar (default: on a terminal)")
    p.set_defaults(func=run_fleet_command)

    d = subparsers.add_parser(
        "demo", help="run broker, aggregator, a campaign and a simulated fleet on this machine",
        description="Start an embedded Mosquitto and the aggregator, create a campaign with a "
                    "fresh signing key, simulate a fleet (plus real MicroPython devices when "
                    "`micropython` is installed), then show true vs estimated heavy hitters and "
                    "write a PNG plot.")
    d.add_argument("--devices", type=int, default=20000)
    d.add_argument("--micropython", type=int, default=None,
                   help="real MicroPython devices (default 3 when `micropython` is installed)")
    d.add_argument("--mechanism", default="olh")
    d.add_argument("--epsilon", type=float, default=2.0)
    d.add_argument("--domain", type=int, default=64, help="domain size d")
    d.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the true items")
    d.add_argument("--top", type=int, default=10, help="heavy hitters to show")
    d.add_argument("--seed", type=int, default=None)
    d.add_argument("--broker", default=None, help="use this broker instead of an embedded one")
    d.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait for the aggregator to accept every report")
    d.add_argument("--out", default=None,
                   help="directory for the plot, the state, the logs and the campaign's signing "
                        "key, kept (default: a temporary directory, removed when the demo ends, "
                        "also on Ctrl-C, unless --keep)")
    d.add_argument("--keep", action="store_true",
                   help="keep the temporary directory (its path is printed)")
    d.add_argument("--json", action="store_true")
    d.add_argument("--dashboard", nargs="?", const="127.0.0.1:0", default=None,
                   metavar="HOST:PORT",
                   help="also serve the HTTP API and the live dashboard (default 127.0.0.1 on a "
                        "free port; PORT 0: a free one), print its URL with a fresh read token, "
                        "and keep broker, aggregator and dashboard up until Ctrl-C")
    d.set_defaults(func=run_demo_command)

    b = subparsers.add_parser(
        "broker-config", help="write a Mosquitto config, password file and per-device ACL",
        description="Each device (username = device id) may publish only to its own report topic "
                    "ldp/<campaign>/r/<device-id> and read its campaigns' config, phase2 and status "
                    "topics; only the aggregator user may publish those and read reports. Passwords "
                    "are stored as PBKDF2-SHA512 hashes; plain ones go to credentials.csv (0600) for "
                    "provisioning and are kept on re-runs.")
    b.add_argument("--out", required=True, help="output directory")
    b.add_argument("--aggregator-user", required=True, action="append",
                   help="the login of `ldpfleet serve`; repeat it for several `serve --group` "
                        "workers, one login each (the broker binds a client id to its login, so two "
                        "workers with one login take each other's connection over)")
    b.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="make N aggregator logins for N `serve --group` workers: the "
                        "--aggregator-user U, then U-2 ... U-N, each with the aggregator's ACL")
    b.add_argument("--admin-user", default=None,
                   help="the login of every other aggregator command: campaign create/advance/"
                        "close/rotate-keys, broker-check (default: <aggregator-user>-admin; client "
                        "ids are bound to logins, so serve needs a login of its own)")
    b.add_argument("--devices-file", required=True, help="device ids, one per line")
    b.add_argument("--campaigns", nargs="*", default=None,
                   help="restrict devices to these campaigns (default: any campaign)")
    b.add_argument("--port", type=tcp_port, default=None,
                   help="listener port (default 8883 with --certfile/--keyfile, else 1883)")
    b.add_argument("--bind", type=host_address, default=None, help="listen address (default: all interfaces)")
    b.add_argument("--max-queued-messages", type=non_negative, default=None,
                   help="per-client queue (default: max(100000, 4 x devices))")
    b.add_argument("--max-queued-bytes", type=non_negative, default=None,
                   help="per-client queue in bytes (default: 2 KiB x --max-queued-messages; "
                        "0 = no byte limit)")
    b.add_argument("--loadgen-user", default=None,
                   help="also a user L for `ldpfleet fleet` (pilots): may publish only under its "
                        "own device-id prefix, ldp/<campaign>/r/L/<id>, and read campaign topics")
    b.add_argument("--max-packet-bytes", type=positive_int, default=1 << 20, metavar="N",
                   help="max_packet_size: larger packets are refused (default 1 MiB: above the "
                        "largest signed config or LDPLCM model)")
    b.add_argument("--insecure-plaintext", action="store_true",
                   help="allow a plaintext listener (without --certfile/--keyfile): passwords and "
                        "reports cross the network in the clear")
    b.add_argument("--certfile", default=None)
    b.add_argument("--keyfile", default=None)
    b.add_argument("--cafile", default=None)
    b.add_argument("--client-ca", default=None, metavar="PEM",
                   help="fleet CA of device client certificates: a second TLS listener "
                        "(--device-port, default the TLS port + 1) requires a certificate it "
                        "signed and takes its CN as the login (`ldpfleet flash --client-ca`, "
                        "`ldpfleet device-cert`)")
    b.add_argument("--device-port", type=tcp_port, default=None)
    b.add_argument("--log-file", default=None, help="broker log file (default: stderr)")
    b.add_argument("--run-as", default="mosquitto",
                   help="user mosquitto drops to when started as root (default: mosquitto)")
    b.set_defaults(func=run_broker_config_command)


def _progress_wanted(args) -> bool:
    return bool(getattr(args, "progress", False)) or (not args.json and sys.stderr.isatty())


def run_fleet_command(args):
    from ..loadgen import FleetOptions, run_fleet
    from ..mqtt.client import BrokerSettings
    from ..core.ackkeys import read_key_file
    from ..broker.secured import read_device_logins
    from ..core.signing import read_public_keys
    trusted_keys = read_public_keys(args.trusted_keys)
    broker = BrokerSettings.from_url(args.broker, username=args.username,
                                     password=resolve_password(args), cafile=args.cafile)
    workdir = args.workdir
    if workdir is None and (args.micropython or args.c_clients):
        workdir = _device_cache(broker, args.campaign)

    def status(line):
        print("fleet %s: %s" % (args.campaign, line), file=sys.stderr, flush=True)
    result = run_fleet(broker, args.campaign, trusted_keys, FleetOptions(
        devices=args.devices, micropython=args.micropython, c_clients=args.c_clients,
        dist=args.dist, seed=args.seed, phase=args.phase, id_prefix=args.id_prefix,
        max_inflight=args.max_inflight, rate=args.rate, set_size=args.set_size,
        progress=_progress_wanted(args), c_client=args.c_client, ack_wait=args.ack_wait,
        workdir=workdir, status=status,
        device_logins=read_device_logins(args.device_logins) if args.device_logins else None,
        ack_root=read_key_file(args.ack_key) if args.ack_key else None,
        ack_login_key=read_key_file(args.ack_login_key, "ack_login_key") if args.ack_login_key
        else None))
    if args.true_counts:
        with open(args.true_counts, "w") as f:
            json.dump(result.to_json(detail=True), f)
    if args.json:
        json.dump(result.to_json(), sys.stdout)
        sys.stdout.write("\n")
    else:
        print(result.summary())
    return 4 if result.acks and result.acks["unacknowledged"] else 0


def _device_cache(broker, campaign: str) -> str:
    """The real devices' state of `fleet` runs against this broker and campaign: kept, so a
    re-run is the same devices (their ledgers re-send the memoised reports)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(root, "ldpfleet", "fleet", "%s_%d" % (broker.host, broker.port), campaign)
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)  # the devices' identities hold their broker logins
    return path


def run_demo_command(args):
    def print_json(result):
        if args.json:  # before --dashboard holds the services up
            json.dump(result, sys.stdout)
            sys.stdout.write("\n")
            sys.stdout.flush()
    try:
        result = _run_demo(args, print_json)
    except KeyboardInterrupt:
        print("ldpfleet: demo interrupted: broker and aggregator stopped%s" % (
            "" if args.out or args.keep else ", its temporary directory removed"),
            file=sys.stderr)
        return 130
    return 0 if result["lost"] == 0 else 1


def _run_demo(args, print_json):
    from ..loadgen import DemoOptions, run_demo
    return run_demo(DemoOptions(
        devices=args.devices, micropython=args.micropython, mechanism=args.mechanism,
        epsilon=args.epsilon, domain=args.domain, zipf=args.zipf, top=args.top, seed=args.seed,
        broker_url=args.broker, timeout=args.timeout, out_dir=args.out,
        progress=_progress_wanted(args), dashboard=args.dashboard, keep=args.keep),
        log=None if args.json else print, on_result=print_json)


def run_broker_config_command(args):
    from ..broker import secured as broker
    device_ids = broker.read_device_ids(args.devices_file)
    aggregators = broker.aggregator_logins(args.aggregator_user, args.workers)
    paths = broker.write_secured_config(args.out, broker.SecuredBroker(
        aggregators[0], device_ids, worker_users=aggregators[1:], campaigns=args.campaigns,
        loadgen_user=args.loadgen_user, admin_user=args.admin_user, client_ca=args.client_ca,
        device_port=args.device_port, port=args.port, bind=args.bind, certfile=args.certfile,
        keyfile=args.keyfile, cafile=args.cafile, max_queued_messages=args.max_queued_messages,
        max_queued_bytes=args.max_queued_bytes, max_packet_bytes=args.max_packet_bytes,
        insecure_plaintext=args.insecure_plaintext, log_file=args.log_file, run_as=args.run_as))
    if not paths["tls"]:
        print("WARNING: the listener is PLAINTEXT (--insecure-plaintext): device passwords and "
              "reports travel unencrypted; use --certfile/--keyfile outside a lab", file=sys.stderr)
    files = [paths[k] for k in ("mosquitto.conf", "passwd", "acl", "credentials.csv")]
    print("wrote %s (%d devices)" % (", ".join(os.path.basename(p) for p in files), len(device_ids)))
    print(BROKER_NEXT_STEPS % {
        "conf": paths["mosquitto.conf"], "creds": paths["credentials.csv"],
        "url": "%s://HOST:%d" % ("mqtts" if paths["tls"] else "mqtt", paths["port"]),
        "ca": " --cafile ca.pem" if paths["tls"] else "", "agg": aggregators[0],
        "admin": args.admin_user or aggregators[0] + "-admin",
        "workers": _worker_steps(aggregators, paths["credentials.csv"],
                                 "%s://HOST:%d" % ("mqtts" if paths["tls"] else "mqtt", paths["port"]),
                                 " --cafile ca.pem" if paths["tls"] else ""),
        "devices": args.devices_file,
        "loadgen": ("\n     ldpfleet fleet --broker URL --username %s --password-file loadgen.pw ..."
                    % args.loadgen_user) if args.loadgen_user else ""})
    return 0


def _worker_steps(aggregators, creds, url, ca) -> str:
    """The next steps' lines for further `serve --group` workers, one login each."""
    if len(aggregators) == 1:
        return ""
    lines = ["", "   %d aggregator logins for %d `serve --group` workers (PostgreSQL state), one each:"
             % (len(aggregators), len(aggregators))]
    for i, user in enumerate(aggregators):
        lines += ["     grep '^aggregator,%s,' %s | cut -d, -f3 > %s.pw && chmod 600 %s.pw"
                  % (user, creds, user, user),
                  "     ldpfleet serve --broker %s%s --username %s --password-file %s.pw --state "
                  "postgresql://... --group pool --client-id pool-%d &" % (url, ca, user, user, i + 1)]
    return "\n".join(lines)


BROKER_NEXT_STEPS = """
next steps:
1. start the broker (as root it drops to its own user; its files were handed to it):
     mosquitto -c %(conf)s
2. a login's client id is its username (use_username_as_clientid: nobody can take over
   another's session), so each login runs one connection at a time: `serve` logs in as
   %(agg)s, every other aggregator command (campaign ..., broker-check) as %(admin)s, with the
   passwords from %(creds)s (roles aggregator and admin) in files only you can read:
     grep '^aggregator,%(agg)s,' %(creds)s | cut -d, -f3 > %(agg)s.pw && chmod 600 %(agg)s.pw
     grep '^admin,' %(creds)s | cut -d, -f3 > admin.pw && chmod 600 admin.pw
     ldpfleet serve --broker %(url)s%(ca)s --username %(agg)s --password-file %(agg)s.pw --state ...
     ldpfleet broker-check --broker %(url)s%(ca)s --username %(admin)s --password-file admin.pw
     ldpfleet campaign create --broker %(url)s%(ca)s --username %(admin)s --password-file admin.pw ...%(loadgen)s
   (or set LDPFLEET_PASSWORD instead of --password-file). Never run a command with serve's
   login while serve runs: it would take over serve's connection (serve then says so and
   stops). Without a login serve logs "Not authorized" and retries forever.%(workers)s
3. %(devices)s lists the devices (one id per line): each may publish only its own report topic,
   logging in with its id and its password from %(creds)s (role device); `ldpfleet
   provision --credentials %(creds)s --out bundles/ --broker-host HOST ...` writes every
   board's bundle with them (`ldpfleet flash --bundle bundles/ID --port ...` flashes one), and
   the C client reads them from its identity file (broker.user / broker.password).
   Re-running broker-config keeps every password already in %(creds)s."""
