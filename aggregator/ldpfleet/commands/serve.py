"""`ldpfleet serve`: the aggregator's ingest loop (service/ingest/loop.py), its HTTP API, its
locks and its start-up broker check."""
import logging
import signal
import sys

from ..core.config import NAME_RE
from ..core.errors import ConfigError
from .common import (broker_args, broker_settings, duration, host_address, non_negative,
                     positive_int, resolve_password, state_arg, tcp_port)

DEFAULT_METRICS_PORT = 9108
"""The metrics port of every deployment file (README, deploy/ldpfleet.toml, compose, the
systemd units, Prometheus' scrape config): one number everywhere (tests/integration/test_deploy.py). Not
9100, the node exporter's, which often runs on the same machine."""


def register(subparsers):
    s = subparsers.add_parser(
        "serve", help="run the aggregator: ingest reports from MQTT into the state file",
        description="Subscribe to ldp/+/r/+ (QoS 1, persistent session, manual acks), "
                    "validate, dedupe and fold reports into per-campaign sketches; every batch is "
                    "committed to the state file before the broker is acknowledged.")
    broker_args(s)
    state_arg(s)
    s.add_argument("--client-id", default=None,
                   help="MQTT client id of the persistent session (default: ldpfleet-agg- and 8 "
                        "hex digits of the state file's path, so two serves with different state "
                        "files never take each other's session, and a restart resumes its own)")
    s.add_argument("--group", default=None, metavar="NAME",
                   help="run as one worker of a group: subscribe through the MQTT shared "
                        "subscription $share/NAME/ldp/+/r/# (the broker gives each report to one "
                        "worker), PostgreSQL state only. Each worker keeps its own persistent "
                        "session; default client id ldpfleet-NAME-<hostname> (a second worker "
                        "on one machine needs --client-id). README: Several workers")
    s.add_argument("--batch-size", type=positive_int, default=10000,
                   help="messages per committed batch, at most (default 10000: with random device "
                        "ids each commit rewrites many pages of the dedupe index, so larger "
                        "batches amortise it; memory is bounded by this x the largest report)")
    s.add_argument("--max-packet-bytes", type=positive_int, default=1 << 20, metavar="N",
                   help="the largest packet serve takes (default 1 MiB): with --mqtt 5 announced "
                        "to the broker as Maximum Packet Size, which then drops larger messages for "
                        "us; with 3.1.1 a larger one is skipped as it streams in (too_large). Either "
                        "way payloads larger than every open campaign's report are dropped on arrival")
    s.add_argument("--batch-ms", type=duration, default=200.0,
                   help="a batch is committed at most this long after its first message")
    s.add_argument("--session-expiry", type=int, default=7 * 86400,
                   help="with --mqtt 5: Session Expiry Interval in seconds (how long the broker keeps "
                        "our queue while we are away; 3.1.1 sessions never expire in Mosquitto "
                        "unless persistent_client_expiration is set)")
    s.add_argument("--mqtt", type=int, choices=(4, 5), default=5,
                   help="5 = MQTT 5 (default): clean_start=False + --session-expiry, and "
                        "--receive-maximum, so a broker with small in-flight limits (Mosquitto's "
                        "packaged max_inflight_messages 20) still sends whole batches; 4 = MQTT "
                        "3.1.1, clean_session=False: the broker's own window holds, serve learns "
                        "it and commits each time it is full (README: what a broker's defaults cost)")
    s.add_argument("--receive-maximum", type=positive_int, default=65535, metavar="N",
                   help="with --mqtt 5: QoS 1 reports the broker may send before serve "
                        "acknowledges them (1..65535, default 65535; serve acknowledges after each "
                        "commit): what one commit can hold, and the most serve keeps in memory "
                        "un-acknowledged")
    s.add_argument("--status-interval", type=duration, default=30.0,
                   help="seconds between retained status publications (0: never)")
    s.add_argument("--progress-interval", type=duration, default=30.0, metavar="SECONDS",
                   help="log what was committed per campaign (accepted/s, duplicates, "
                        "rejected, broker drops) at most this often, when something changed "
                        "(default 30; 0: never). Campaign changes and the shutdown are always "
                        "logged")
    s.add_argument("--devices-file", default=None, metavar="FILE",
                   help="the provisioned fleet, one device id per line (broker-config's "
                        "--devices-file): coverage (devices that reported / provisioned) in the "
                        "API, the dashboard and /metrics; re-read when it changes")
    s.add_argument("--metrics-port", type=tcp_port, default=None,
                   help="serve Prometheus metrics here (the deployment files use %d)"
                   % DEFAULT_METRICS_PORT)
    s.add_argument("--metrics-bind", type=host_address, default="127.0.0.1", metavar="ADDR",
                   help="address the metrics listen on (default 127.0.0.1; 0.0.0.0 for every "
                        "interface, e.g. for a Prometheus on another machine)")
    s.add_argument("--http", default=None, metavar="HOST:PORT",
                   help="serve the HTTP API here: /campaigns, /campaigns/NAME[/estimate], "
                        "/healthz, /readyz, /metrics (it may share --metrics-port), "
                        "/openapi.json; read-only unless --http-write-token-file")
    s.add_argument("--http-token-file", default=None, metavar="FILE",
                   help="bearer token (first line) every HTTP endpoint but /healthz and /readyz needs")
    s.add_argument("--http-write-token-file", default=None, metavar="FILE",
                   help="bearer token of the write endpoints (advance, close); without it they answer 403")
    s.add_argument("--http-allowed-hosts", action="append", default=[], type=host_address,
                   metavar="NAME",
                   help="a host name the HTTP API answers to besides IP addresses, localhost and "
                        "the host of --http (repeatable; e.g. the name a TLS reverse proxy "
                        "forwards): any other Host header gets 400, so a web page cannot reach "
                        "the API by rebinding its own DNS name to this machine")
    s.add_argument("--http-admin-username", default=None, metavar="USER",
                   help="broker login the write endpoints publish with (needed when serve "
                        "logs in: serve's own login would hand its session over)")
    s.add_argument("--http-admin-password-file", default=None, metavar="PATH",
                   help="password of --http-admin-username (first line)")
    s.add_argument("--max-devices-per-login", type=non_negative, default=1_000_000, metavar="N",
                   help="device ids one load-generator login (topics ldp/C/r/LOGIN/ID) may bring "
                        "into a campaign phase (default 1,000,000; 0: no bound): reports of "
                        "further new ids are rejected as device_limit, so a login cannot grow "
                        "serve's dedupe keys without end")
    s.add_argument("--purge-after-days", type=float, default=None, metavar="DAYS",
                   help="retention: drop the dedupe keys of campaigns closed more than DAYS "
                        "days ago (at start, then hourly; `campaign purge` does it by hand)")
    s.add_argument("--ack-key", default=None, metavar="FILE",
                   help="the fleet's ack root key (`ldpfleet ack-key init FILE`; a secret, mode "
                        "0600): acknowledgements carry a MAC under each device's key (spec §6), so "
                        "nobody else can stop a device's re-sends. Without it acknowledgements are "
                        "plain 12 bytes (a warning at start)")
    s.add_argument("--log-level", default="INFO")
    s.add_argument("--no-broker-check", action="store_true",
                   help="skip the start-up preflight (`ldpfleet broker-check` with %d messages, "
                        "in the background: a warning when the broker would drop reports)"
                   % 2000)
    s.set_defaults(func=run_serve)


def run_serve(args):
    from ..service.ingest.loop import IngestOptions, Ingestor
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    from ..service.ingest.loop import default_client_id
    from ..service.state.store import is_postgres, state_path
    postgres = is_postgres(args.state)
    if args.group and not postgres:
        raise ConfigError("group", "--group needs PostgreSQL state (--state postgresql://...): "
                          "a SQLite file has one writer")
    if args.group is not None and not NAME_RE.match(args.group):
        raise ConfigError("group", "group name %r: letters, digits, '-' and '_' only" % args.group)
    if args.receive_maximum > 65535:
        raise ConfigError("receive_maximum", "at most 65535 (MQTT 5's two-byte Receive Maximum)")
    client_id = args.client_id or default_client_id(
        args.state if postgres else state_path(args.state), args.group)
    ack_key = _ack_key(args.ack_key)
    options = IngestOptions(client_id=client_id, batch_size=max(1, args.batch_size),
                            batch_ms=max(1.0, args.batch_ms), session_expiry=args.session_expiry,
                            status_interval=args.status_interval, protocol=args.mqtt,
                            receive_maximum=args.receive_maximum,
                            max_packet_bytes=args.max_packet_bytes, group=args.group,
                            purge_after_days=args.purge_after_days, dedupe_key=args.dedupe_key,
                            max_devices_per_login=args.max_devices_per_login,
                            ack_key=ack_key)
    from ..service.campaigns.coverage import fleet_of
    fleet = fleet_of(args.devices_file)
    metrics = None
    http = _http_address(args)
    if args.metrics_port is not None or http:
        from ..service.http.metrics import ServiceMetrics
        metrics = ServiceMetrics(state_url=args.state, fleet=fleet)  # + the committed totals
    if args.metrics_port is not None and not (http and http[1] == args.metrics_port):
        try:
            metrics.serve(args.metrics_port, addr=args.metrics_bind)
        except OSError as exc:
            raise ConfigError("metrics_port", "cannot serve metrics on %s:%d: %s (another process "
                              "uses the port? choose another --metrics-port)"
                              % (args.metrics_bind, args.metrics_port, exc.strerror or exc)) from None
    lock = _worker_lock(args.state, client_id) if postgres else _serve_lock(state_path(args.state))
    broker = broker_settings(args)
    ingestor = Ingestor(args.state, broker, options, metrics=metrics)
    logging.getLogger("ldpfleet.service").info(  # a missing or wrong key file: exit 2 here
        "dedupe keys from %s (fingerprint %s)", ingestor.store.dedupe_key_file,
        ingestor.store.dedupe_root.fingerprint[:12])
    ingestor.store.set_meta("serve.username", broker.username or "")
    if broker.username and not args.no_broker_check:
        # its two connections would take over serve's own where client ids are bound to
        # logins (broker-config's brokers): the check needs another login
        logging.getLogger("ldpfleet.service").info(
            "broker-check not run at start: it would log in as %s, serve's own login; run "
            "`ldpfleet broker-check` with the admin login instead", broker.username)
    elif not args.no_broker_check:
        _preflight(broker, ingestor.broker_drops)
    if metrics is not None:
        metrics.ingest_subscribed(lambda: ingestor.connected)
    if http:
        _start_http(args, http, metrics, broker, ingestor, fleet)
    from ..service.ingest.progress import ProgressLog
    ingestor.progress = ProgressLog(args.state, client_id, interval=args.progress_interval)
    stop_reason = []

    def stop(signum, _frame):
        stop_reason.append(signal.Signals(signum).name)
        ingestor.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    _warn_without_ack_key(ack_key)
    logging.getLogger("ldpfleet.service").info("serving %s -> %s", args.broker, ingestor.store.path)
    try:
        ingestor.run()
    except BaseException as exc:
        ingestor.progress.stopped("error: %s" % (str(exc).strip() or type(exc).__name__))
        raise
    ingestor.progress.stopped(stop_reason[0] if stop_reason else "stopped")
    lock.close()
    return 0


def _ack_key(path):
    """The ack root key of `--ack-key` (read before anything starts), or None."""
    if path is None:
        return None
    from ..core.ackkeys import read_key_file
    return read_key_file(path)


def _warn_without_ack_key(ack_key):
    """One warning when serve starts without --ack-key: then anyone who can publish on a
    device's ack topic can stop its re-sends."""
    if ack_key is None:
        logging.getLogger("ldpfleet.service").warning(
            "no --ack-key: acknowledgements are not authenticated (spec §6), so whoever can "
            "publish on ldp/<campaign>/a/<device> can stop that device's re-sends; create one "
            "with `ldpfleet ack-key init FILE` and provision devices with their keys")


def _http_address(args):
    """(host, port) of --http, or None; its token files are read here, before anything starts."""
    if args.http is None:
        for flag in ("http_token_file", "http_write_token_file", "http_admin_username",
                     "http_allowed_hosts"):
            if getattr(args, flag):
                raise ConfigError(flag, "--%s needs --http HOST:PORT" % flag.replace("_", "-"))
        return None
    import ipaddress
    from ..service.http.api import ApiTokens, parse_address
    args.http_tokens = ApiTokens.from_files(args.http_token_file, args.http_write_token_file)
    host, port = parse_address(args.http)
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and args.http_token_file is None:
        raise ConfigError("http_token_file", "--http on %s (not loopback) needs "
                          "--http-token-file: the API would show every campaign to anyone who "
                          "reaches the port" % host)
    return host, port


def _start_http(args, address, metrics, broker, ingestor, fleet=None):
    """The HTTP API (service/http/api.py) in a daemon thread, with its own store connections;
    /readyz follows the ingest's broker connection."""
    import argparse
    import dataclasses
    from ..service.http.api import create_app, start_http
    if args.http_admin_username:
        password = resolve_password(argparse.Namespace(
            password=None, password_file=args.http_admin_password_file))
        broker = dataclasses.replace(broker, username=args.http_admin_username, password=password)
    app = create_app(args.state, metrics=metrics, tokens=args.http_tokens, broker=broker,
                     ready=lambda: ingestor.connected, fleet=fleet,
                     allowed_hosts=[address[0]] + list(args.http_allowed_hosts))
    start_http(app, *address)
    logging.getLogger("ldpfleet.service").info("HTTP API on http://%s:%d/", *address)


def _preflight(broker, drops):
    """`broker-check` in a daemon thread: a warning naming the settings, never a stop. The
    messages it makes the broker drop are its own, not reports: `drops` (BrokerDrops) leaves
    them out of what serve reports."""
    import threading
    log = logging.getLogger("ldpfleet.service")

    def check():
        from ..broker.check import check_broker
        drops.hold()
        result = None
        try:
            result = check_broker(broker)
        except Exception as exc:  # the check is advice; ingest matters more
            log.warning("broker-check could not run: %s", exc)
            return
        finally:
            drops.release(result.messages - result.kept if result is not None else 0)
        (log.info if result.passed else log.warning)("broker-check: %s", result.summary())

    threading.Thread(target=check, name="broker-check", daemon=True).start()


def _worker_lock(url: str, client_id: str):
    """PostgreSQL: a session advisory lock on the worker's client id, held by its own
    connection for the life of this serve (the server drops it when the process dies): two
    workers with one client id would take each other's MQTT session. Exit 2 when it is held."""
    from ..service.state.sql import PostgresConnection
    conn = PostgresConnection(url, 10.0)
    held = conn.execute("SELECT pg_try_advisory_lock(hashtext(?))",
                        ("ldpfleet-worker:" + client_id,)).fetchone()[0]
    if not held:
        conn.close()
        raise ConfigError("client_id", "another serve runs with client id %s on %s (each worker "
                          "of a group needs its own --client-id)" % (client_id, conn.where))
    return conn


def _serve_lock(path: str):
    """An exclusive lock on `<state>.serve.lock` for the life of this serve: one writer per
    state file (two would interleave batches and acks). The OS drops it when the process dies,
    kill -9 included. Exit 2 naming the holder when another serve has it."""
    import fcntl
    import os
    lock_path = os.path.realpath(path) + ".serve.lock"  # one lock per file, whatever the path
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    f = open(lock_path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise ConfigError("state", "%s is already served by %s (one serve per state file; a "
                          "second machine or worker needs its own state)" % (path, holder)) from None
    f.seek(0)
    f.truncate()
    f.write("ldpfleet serve pid %d" % os.getpid())
    f.flush()
    return f
