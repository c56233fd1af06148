"""`ldpfleet fleet`: the load generator, simulated devices (and real MicroPython or C client
processes) reporting to a campaign (ldpfleet.loadgen)."""
import json
import os
import sys

from .common import add_password_args, resolve_password


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
    p.add_argument("--ack-wait", type=float, default=None, metavar="S",
                   help="campaigns with acknowledgements (spec §6): each simulated device re-sends "
                        "its unacknowledged report on its own timer (retry_s x U[0.5, 1.5), "
                        "doubling), for up to S seconds after the last first publish (default 120; "
                        "a recurring campaign: until the round closes); progress goes to stderr "
                        "every few seconds")
    rec = p.add_argument_group(
        "recurring campaigns (a config with a schedule, spec §3.4)",
        "Each simulated device enrols once (its permanent state drawn as a device draws it), "
        "then in every round that opens while fleet runs its value changes with probability "
        "--change-rate and it sends the round's report (a fresh nonce, the round header) and "
        "re-sends it until acknowledged or the round closes. One line per round on stdout; "
        "--truth FILE keeps the true per-round counts. Draws come from OS entropy unless --seed.")
    rec.add_argument("--change-rate", type=float, default=0.1, metavar="P",
                     help="each device's chance per round of drawing a new value from --dist "
                          "(default 0.1; 0: constant values)")
    rec.add_argument("--rounds-to-run", type=int, default=None, metavar="N",
                     help="stop after N rounds (default: every round until the campaign's last)")
    rec.add_argument("--truth", default=None, metavar="FILE",
                     help="write the true counts per round as JSON {round: {item: count}} to "
                          "FILE, rewritten after every round")
    p.add_argument("--ack-key", default=None, metavar="FILE",
                   help="the fleet's ack root key (serve's --ack-key): simulated devices take only "
                        "acks MAC'd under their keys (spec §6), real devices are provisioned with "
                        "theirs; without a key the plain 12 bytes of an ack are checked")
    p.add_argument("--ack-login-key", default=None, metavar="FILE",
                   help="instead of the root key, the key of this generator's --username login "
                        "(`ldpfleet ack-key login`): enough to check its simulated devices' acks")
    p.add_argument("--dist", default=None,
                   help="zipf:S over the domain (default zipf:1.1), or FILE with one `item "
                        "[weight]` per line; a numeric campaign's readings: beta:A,B scaled into "
                        "the range (default beta:2,5), uniform, normal:MU,SD or constant:V")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the simulator's item draws and perturbation words and of the "
                        "device ids (default: the campaign's id, so a re-run against the same "
                        "campaign re-sends the same devices' reports, counted as duplicates; "
                        "another seed simulates other devices). Recurring campaigns: default OS "
                        "entropy (states, values, nonces); a seed makes a run reproducible")
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


def progress_wanted(args) -> bool:
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
    truth = {}

    def on_round(one):
        if not args.json:
            print(one.line(), flush=True)
        if args.truth:
            truth[str(one.round)] = {str(k): int(v) for k, v in one.true_counts.items()}
            _write_json(args.truth, truth)
    result = run_fleet(broker, args.campaign, trusted_keys, FleetOptions(
        devices=args.devices, micropython=args.micropython, c_clients=args.c_clients,
        dist=args.dist, seed=args.seed, phase=args.phase, id_prefix=args.id_prefix,
        max_inflight=args.max_inflight, rate=args.rate, set_size=args.set_size,
        progress=progress_wanted(args), c_client=args.c_client, ack_wait=args.ack_wait,
        workdir=workdir, status=status, change_rate=args.change_rate,
        rounds_to_run=args.rounds_to_run, on_round=on_round,
        device_logins=read_device_logins(args.device_logins) if args.device_logins else None,
        ack_root=read_key_file(args.ack_key) if args.ack_key else None,
        ack_login_key=read_key_file(args.ack_login_key, "ack_login_key") if args.ack_login_key
        else None))
    if args.true_counts:
        _write_json(args.true_counts, result.to_json(detail=True))
    if args.truth:
        if not hasattr(result, "truth"):
            print("ldpfleet fleet: --truth is for recurring campaigns (use --true-counts)",
                  file=sys.stderr)
        else:
            _write_json(args.truth, result.truth())
    if args.json:
        json.dump(result.to_json(), sys.stdout)
        sys.stdout.write("\n")
    else:
        print(result.summary())
    return 4 if result.acks and result.acks["unacknowledged"] else 0


def _write_json(path: str, doc):
    """Write `doc` to `path` whole (a reader never sees half a file)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def _device_cache(broker, campaign: str) -> str:
    """The real devices' state of `fleet` runs against this broker and campaign: kept, so a
    re-run is the same devices (their ledgers re-send the memoised reports)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(root, "ldpfleet", "fleet", "%s_%d" % (broker.host, broker.port), campaign)
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)  # the devices' identities hold their broker logins
    return path
