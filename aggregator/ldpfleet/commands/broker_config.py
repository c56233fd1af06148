"""`ldpfleet broker-config`: a secured Mosquitto config with a password file and a per-device
ACL (broker/secured.py)."""
import os
import sys

from .common import host_address, non_negative, positive_int, tcp_port


def register(subparsers):
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
