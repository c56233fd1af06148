"""`ldpfleet broker-config`: a production Mosquitto config for a fleet — a password file
(PBKDF2-SHA512 hashes), a per-device ACL (each device publishes only its own report topic),
credentials.csv for provisioning, TLS listeners and queue limits sized so a slow aggregator
loses nothing (Mosquitto drops QoS 1 messages past `max_queued_messages`; eclipse/mosquitto
issue #3687). Also what other commands read back from those files (device ids and logins).
"""
import base64
import csv
import hashlib
import io
import os
import pwd
import secrets
from dataclasses import dataclass

from ..core.config import NAME_RE
from ..core.csvcells import cell, uncell
from ..core.errors import ConfigError


def queue_lines(max_queued_messages: int = 1_000_000, max_queued_bytes: int = 0,
                max_inflight_messages: int = 0) -> list:
    """Broker limits for a zero-loss ingest path: the aggregator's session queue must hold a
    whole burst (field notes: the default 1000 loses QoS 1 messages to a slow subscriber)."""
    return ["max_queued_messages %d" % max_queued_messages,
            "max_queued_bytes %d" % max_queued_bytes,
            "max_inflight_messages %d" % max_inflight_messages]


PBKDF2_ITERATIONS = 101  # mosquitto_passwd's default for the `$7$` (sha512-pbkdf2) format


def password_hash(password: str, salt: bytes = None, iterations: int = PBKDF2_ITERATIONS) -> str:
    """A Mosquitto 2 password-file hash: `$7$<iterations>$<b64 salt>$<b64 PBKDF2-HMAC-SHA512>`
    (the format `mosquitto_passwd -H sha512-pbkdf2` writes; 12-byte salt, 64-byte key)."""
    salt = os.urandom(12) if salt is None else salt
    key = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations)
    return "$7$%d$%s$%s" % (iterations, base64.b64encode(salt).decode("ascii"),
                            base64.b64encode(key).decode("ascii"))


def read_device_ids(path: str, field: str = "device_id") -> list:
    """Device ids, one per line (blank lines and `#` comments skipped); each must match the
    topic-segment rule of spec §4, and no id may repeat (ConfigError naming `field`)."""
    ids, seen = [], set()
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            name = line.split("#", 1)[0].strip()
            if not name:
                continue
            if not NAME_RE.match(name):
                raise ConfigError(field, "%s:%d: %r does not match [A-Za-z0-9_-]{1,64}"
                                  % (path, lineno, name))
            if name in seen:
                raise ConfigError(field, "%s:%d: %r listed twice" % (path, lineno, name))
            seen.add(name)
            ids.append(name)
    if not ids:
        raise ConfigError(field, "%s lists no device ids" % path)
    return ids


CHECK_TOPIC_ROOT = "ldpfleet/check"
"""Topics `ldpfleet broker-check` publishes and reads (the aggregator's login only)."""


def acl_text(aggregator_user, campaigns=None, loadgen_user: str = None,
             admin_user: str = None, device_ids=()) -> str:
    """Mosquitto ACL: each device (username = device id) may publish only to its own report
    topic and read its campaigns' config/phase2/status, the key rotations and its own
    acknowledgement topic; only the aggregator user publishes configs, phase-2 messages, status,
    key rotations and acknowledgements, reads
    reports and the broker's drop counter, and uses the `broker-check` topics (spec §4). An
    optional load generator user `L` (`ldpfleet fleet` for pilots: one connection for many
    simulated devices) may publish only `ldp/<c>/r/L/+` (its own device-id prefix, spec §4) and
    read the campaign topics, the key rotations and `ldp/<c>/a/L/+`, but neither publish
    configs nor read reports. The admin user (campaign commands, broker-check, key rotation)
    has the aggregator's rights: with client ids bound to logins, `serve` and the commands need
    one login each.

    `aggregator_user`: one login, or a list of them (one per `serve` worker of a group: on a
    broker that binds client ids to logins each connection needs its own). A worker subscribes
    through `$share/<group>/ldp/+/r/#`; Mosquitto 2.0 grants that subscription and checks the
    read right on each report's own topic when it delivers (checked with 2.0.11: a device's
    `$share/...` subscription is granted and gets nothing), so the aggregator's `ldp/#` is the
    line a shared subscription needs.

    `pattern` lines apply to every authenticated user, with %u replaced by the username
    (Mosquitto refuses the substitution for usernames holding `+`, `#` or `/`): a device's own
    report and acknowledgement topics. The topics every device reads hold no %u, and Mosquitto
    warns at every start about a pattern without one, so each device login gets them in its
    own `user` block."""
    scopes = list(campaigns) if campaigns else ["+"]
    shared = ["topic read ldpfleet/keys"] + ["topic read ldp/%s/%s" % (scope, leaf)
                                             for scope in scopes
                                             for leaf in ("config", "phase2", "status")]
    lines = ["# ldpfleet broker ACL (generated by `ldpfleet broker-config`)",
             "# devices: username = device id; each publishes only its own report topic"]
    for scope in scopes:
        lines.append("pattern write ldp/%s/r/%%u" % scope)
        lines.append("pattern read ldp/%s/a/%%u" % scope)
    if device_ids:
        lines += ["", "# every device reads the key rotations (spec §5.3) and its campaigns' "
                  "config, phase-2 and status topics"]
    for device in device_ids:
        lines += ["user %s" % device] + shared
    if loadgen_user:
        lines += ["", "# the load generator (ldpfleet fleet): reports for simulated devices",
                  "user %s" % loadgen_user, "topic read ldpfleet/keys"]
        for scope in scopes:
            lines.append("topic write ldp/%s/r/%s/+" % (scope, loadgen_user))
            for leaf in ("config", "phase2", "status", "a/%s/+" % loadgen_user):
                lines.append("topic read ldp/%s/%s" % (scope, leaf))
    workers = [aggregator_user] if isinstance(aggregator_user, str) else list(aggregator_user)
    for title, user in ([("the aggregator (serve)" if len(workers) == 1 else
                          "aggregator worker %d of %d (serve --group: $share/<group>/ldp/+/r/# "
                          "reads the reports under ldp/#)" % (i + 1, len(workers)), w)
                         for i, w in enumerate(workers)]
                        + [("the aggregator's commands (campaign, broker-check)", admin_user)]):
        if user:
            lines += ["", "# " + title, "user %s" % user, "topic readwrite ldp/#",
                      "topic readwrite ldpfleet/keys", "topic readwrite %s/#" % CHECK_TOPIC_ROOT,
                      "topic read $SYS/broker/publish/messages/dropped"]
    return "\n".join(lines + [""])


def aggregator_logins(users: list, workers: int = None) -> list:
    """The aggregator logins of `broker-config`: the `--aggregator-user`s as given (one per
    `serve` worker), or, with `--workers N` and one user U, U, U-2, ..., U-N (U stays the first,
    so a single serve's login is kept when workers are added)."""
    users = list(users)
    if workers is None or workers == len(users):
        return users
    if workers < 1:
        raise ConfigError("workers", "must be >= 1, got %d" % workers)
    if len(users) != 1:
        raise ConfigError("workers", "--workers %d with %d --aggregator-user logins: give one "
                          "login (the others are named after it) or one per worker"
                          % (workers, len(users)))
    return users + ["%s-%d" % (users[0], i) for i in range(2, workers + 1)]


def _read_credentials(path: str) -> dict:
    """Existing `role,username,password` rows, so a re-run keeps provisioned passwords."""
    creds = {}
    if os.path.exists(path):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                creds[uncell(row["username"])] = row["password"]
    return creds


def read_device_logins(path: str, field: str = "device_logins") -> list:
    """[(username, password)] of the `device` rows of a credentials.csv, in file order
    (ConfigError naming `field`, the option that named the file)."""
    try:
        with open(path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("role") == "device"]
    except OSError as exc:
        raise ConfigError(field, "cannot read %s: %s" % (path, exc.strerror)) from None
    except csv.Error as exc:
        raise ConfigError(field, "%s: %s" % (path, exc)) from None
    if not rows or not all(r.get("username") and r.get("password") for r in rows):
        raise ConfigError(field, "%s has no role,username,password rows of role device "
                          "(broker-config's credentials.csv has)" % path)
    return [(uncell(r["username"]), r["password"]) for r in rows]


RESERVED_LOGINS = frozenset({"agg", "aggregator", "admin", "loadgen", "ldp-aggregator",
                             "ldpfleet", "mosquitto", "root"})
"""Login names of the aggregator side in our docs and defaults (README's `agg`, the deploy
config's `ldp-aggregator`, ...): never a device's."""
RESERVED_PREFIXES = ("ldpfleet-",)
"""serve's default client ids and the worker logins of deploy/systemd (`ldpfleet-<worker>`)."""
RESERVED_SUFFIXES = ("-admin",)
"""broker-config's default admin login, `<aggregator-user>-admin`."""


def check_device_login(device_id: str, credentials: str = None):
    """ConfigError unless `device_id` may name a device's client certificate. On a listener
    that takes the certificate's CN as the login (broker-config --client-ca), a certificate for
    the aggregator's, the admin's, the load generator's or a worker's login would read every
    report: such names are refused (`RESERVED_*`), and with `credentials` (broker-config's
    credentials.csv) any name that is not a device row there."""
    if not NAME_RE.match(device_id or ""):
        raise ConfigError("device_id", "must match [A-Za-z0-9_-]{1,64}")
    low = device_id.lower()
    if low in RESERVED_LOGINS or low.startswith(RESERVED_PREFIXES) or low.endswith(RESERVED_SUFFIXES):
        raise ConfigError("device_id", "%r is reserved for aggregator-side logins (%s, names "
                          "starting with %s or ending in %s): a certificate with that CN would "
                          "log in with their rights; give the device another id"
                          % (device_id, ", ".join(sorted(RESERVED_LOGINS)),
                             "/".join(RESERVED_PREFIXES), "/".join(RESERVED_SUFFIXES)))
    if credentials is not None:
        roles = _read_roles(credentials)
        if roles.get(device_id) != "device":
            raise ConfigError("device_id", "%r is %s in %s: only a device's login gets a device "
                              "certificate" % (device_id, "the %s login" % roles[device_id]
                                               if device_id in roles else "not listed",
                                               credentials))


def _read_roles(path: str) -> dict:
    """username -> role of a credentials.csv."""
    try:
        with open(path, newline="") as f:
            return {uncell(r["username"]): r["role"] for r in csv.DictReader(f)
                    if r.get("username") and r.get("role")}
    except OSError as exc:
        raise ConfigError("credentials", "cannot read %s: %s" % (path, exc.strerror)) from None
    except (csv.Error, KeyError) as exc:
        raise ConfigError("credentials", "%s is not broker-config's credentials.csv: %s"
                          % (path, exc)) from None


def _write_private(path: str, text: str):
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", newline="") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


QUEUED_BYTES_PER_MESSAGE = 2048
"""Default byte budget per queued message: above the largest report of the usual mechanisms
(OLH/CMS/SH: under 200 bytes; OUE over 16,000 items: 2 KB), so the byte limit bounds the
broker's memory (100,000 queued x 2 KiB = 200 MiB per session) without dropping reports."""


@dataclass
class SecuredBroker:
    """What `broker-config` writes a production broker for: the aggregator's login, the device
    ids (one login and one report topic each), the campaigns whose config topics the aggregator
    may publish, an optional load-generator login, the listener (port: 8883 with TLS, else
    1883; bind address; TLS certificate, key and CA), queue limits (None: 4 x devices, at
    least 100,000), the log file and the user mosquitto drops to."""

    aggregator_user: str
    """The login of `serve` (and the default admin login's stem, `<aggregator_user>-admin`)."""
    device_ids: list
    campaigns: list = None
    loadgen_user: str = None
    admin_user: str = None
    """The login of every other aggregator-side command (None: `<aggregator_user>-admin`)."""
    client_ca: str = None
    """Fleet CA: a second TLS listener (`device_port`) requires a client certificate it signed
    and takes the certificate's CN as the login (devices without passwords)."""
    device_port: int = None
    """Port of that listener (None: the TLS port + 1)."""
    port: int = None
    bind: str = None
    certfile: str = None
    keyfile: str = None
    cafile: str = None
    max_queued_messages: int = None
    max_queued_bytes: int = None
    """None: max_queued_messages x QUEUED_BYTES_PER_MESSAGE (0 = no byte limit)."""
    max_packet_bytes: int = 1 << 20
    """`max_packet_size`: the broker refuses (and disconnects) anyone sending a larger packet."""
    insecure_plaintext: bool = False
    """Without a certificate the listener is plaintext only when this says so."""
    max_inflight_messages: int = 10000
    """Per client: serve's default --batch-size, so a batch can fill before it is acknowledged
    (serve acknowledges only after the commit)."""
    log_file: str = None
    run_as: str = "mosquitto"
    worker_users: list = None
    """More aggregator logins, one per further `serve --group` worker (same rights as
    `aggregator_user`): the broker binds a client id to its login, so two workers with one
    login would take each other's connection over."""

    @property
    def aggregator_users(self) -> list:
        return [self.aggregator_user] + list(self.worker_users or [])

    def check(self):
        """ConfigError naming the first bad field."""
        aggregators = self.aggregator_users
        for agg in aggregators:
            if not NAME_RE.match(agg):
                raise ConfigError("aggregator_user", "%r must match [A-Za-z0-9_-]{1,64}" % agg)
            if agg in self.device_ids:
                raise ConfigError("aggregator_user", "%r is also listed as a device" % agg)
        if len(set(aggregators)) != len(aggregators):
            raise ConfigError("aggregator_user", "each worker needs its own login: %s"
                              % ", ".join(aggregators))
        user = self.loadgen_user
        if user is not None and (not NAME_RE.match(user) or user in aggregators
                                 or user in self.device_ids):
            raise ConfigError("loadgen_user", "must match [A-Za-z0-9_-]{1,64} and differ from "
                              "the aggregator and every device")
        admin = self.admin
        if (not NAME_RE.match(admin) or admin in aggregators or admin == self.loadgen_user
                or admin in self.device_ids):
            raise ConfigError("admin_user", "%r must match [A-Za-z0-9_-]{1,64} and differ from "
                              "every other login" % admin)
        for name in self.campaigns or []:
            if not NAME_RE.match(name):
                raise ConfigError("campaign", "%r does not match [A-Za-z0-9_-]{1,64}" % name)
        if (self.certfile is None) != (self.keyfile is None):
            raise ConfigError("tls", "give both --certfile and --keyfile, or neither")
        if self.client_ca is not None and self.certfile is None:
            raise ConfigError("client_ca", "client certificates need the TLS listener: give "
                              "--certfile and --keyfile too")
        if self.certfile is None and not self.insecure_plaintext:
            raise ConfigError("tls", "a production broker speaks TLS: give --certfile and --keyfile "
                              "(or --insecure-plaintext, which sends passwords and reports in the "
                              "clear)")

    @property
    def admin(self) -> str:
        return self.admin_user or self.aggregator_user + "-admin"

    def logins(self) -> list:
        """(role, username) of every login."""
        rows = [("aggregator", user) for user in self.aggregator_users] + [("admin", self.admin)]
        rows += [("device", d) for d in self.device_ids]
        if self.loadgen_user:
            rows.append(("loadgen", self.loadgen_user))
        return rows


def write_secured_config(out_dir: str, plan: SecuredBroker) -> dict:
    """Write mosquitto.conf, passwd (PBKDF2-SHA512 hashes), acl and credentials.csv
    (plain passwords for provisioning, mode 0600) into `out_dir`; returns their paths.

    Passwords already in `out_dir/credentials.csv` are kept; new users get random ones.
    Mosquitto started as root drops to `plan.run_as` before it reads the password file, so when
    this runs as root the broker's files (not credentials.csv) are handed to that user.
    With a certificate and key the one listener speaks TLS; they and the CA are copied into
    `out_dir/tls/` (key 0600) and handed to `run_as` too, because mosquitto reads them after
    dropping privileges and a root-only key would make it fail to start ("Unable to load
    server key file")."""
    plan.check()
    out_dir = os.path.abspath(out_dir)
    data_dir = os.path.join(out_dir, "data")
    os.makedirs(data_dir, exist_ok=True)
    paths = {name: os.path.join(out_dir, name)
             for name in ("mosquitto.conf", "passwd", "acl", "credentials.csv")}
    _write_logins(paths, plan)
    port = plan.port if plan.port is not None else (8883 if plan.certfile else 1883)
    queued = plan.max_queued_messages
    if queued is None:
        queued = max(100_000, 4 * len(plan.device_ids))
    queued_bytes = plan.max_queued_bytes
    if queued_bytes is None:
        queued_bytes = queued * QUEUED_BYTES_PER_MESSAGE
    lines = ["# ldpfleet broker config (generated by `ldpfleet broker-config`)",
             "per_listener_settings false", "user %s" % plan.run_as,
             "listener %d" % port + (" %s" % plan.bind if plan.bind else "")]
    tls_files = _copy_tls(os.path.join(out_dir, "tls"), plan) if plan.certfile else {}
    client_ca = tls_files.pop("client_ca", None)
    lines += ["%s %s" % (name, path) for name, path in tls_files.items()]
    device_port = None
    if client_ca:
        device_port = plan.device_port or port + 1
        lines += ["# devices with a client certificate from the fleet CA: its CN is their login",
                  "listener %d" % device_port + (" %s" % plan.bind if plan.bind else ""),
                  "certfile %s" % tls_files["certfile"], "keyfile %s" % tls_files["keyfile"],
                  "cafile %s" % client_ca, "require_certificate true",
                  "use_identity_as_username true"]
        tls_files["client_ca"] = client_ca
    lines += ["allow_anonymous false", "password_file %s" % paths["passwd"],
              "acl_file %s" % paths["acl"],
              "# a login's client id is its username: nobody can take over another's session",
              "# (the aggregator's queue included) or kick another device off",
              "use_username_as_clientid true",
              "# queues sized so a slow aggregator loses nothing (QoS 1 is dropped past the limit)"]
    lines += queue_lines(queued, queued_bytes, plan.max_inflight_messages)
    lines += ["# no packet larger than this from anyone (a 16 MB 'report' is refused at the door)",
              "max_packet_size %d" % plan.max_packet_bytes]
    log_file = os.path.abspath(plan.log_file) if plan.log_file else None
    lines += ["persistence true", "persistence_location %s/" % data_dir, "autosave_interval 60",
              "persistent_client_expiration 30d",
              "log_dest %s" % ("file %s" % log_file if log_file else "stderr"),
              "log_type error", "log_type warning", "log_type notice", "log_type information"]
    with open(paths["mosquitto.conf"], "w") as f:
        f.write("\n".join(lines) + "\n")
    tls = list(tls_files.values())
    _hand_over(plan.run_as, [paths["passwd"], paths["acl"], paths["mosquitto.conf"], data_dir]
               + ([os.path.dirname(tls[0])] if tls else []) + tls
               + ([log_file] if log_file else []))
    paths["port"] = port
    paths["device_port"] = device_port
    paths["tls"] = bool(plan.certfile)
    return paths


def new_password() -> str:
    """144 random bits, URL-safe, never starting with "-" (a command line would take it for an
    option: `--password -x...`)."""
    while True:
        password = secrets.token_urlsafe(18)
        if not password.startswith("-"):
            return password


def _write_logins(paths: dict, plan: SecuredBroker):
    """credentials.csv (0600, known passwords kept), passwd and acl."""
    known = _read_credentials(paths["credentials.csv"])
    creds = [(role, user, known.get(user) or new_password()) for role, user in plan.logins()]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["role", "username", "password"])
    writer.writerows((role, cell(user), pw) for role, user, pw in creds)  # ids may start with -
    _write_private(paths["credentials.csv"], buf.getvalue())
    _write_private(paths["passwd"], "".join("%s:%s\n" % (user, password_hash(pw))
                                            for _, user, pw in creds))
    with open(paths["acl"], "w") as f:
        f.write(acl_text(plan.aggregator_users, plan.campaigns, plan.loadgen_user, plan.admin,
                         plan.device_ids))


def _copy_tls(tls_dir: str, plan: SecuredBroker) -> dict:
    """Copy the certificate, key (0600) and CA into `tls_dir`: {mosquitto option: copy}."""
    os.makedirs(tls_dir, exist_ok=True)
    copies = {}
    for name, src in (("certfile", plan.certfile), ("keyfile", plan.keyfile),
                      ("cafile", plan.cafile), ("client_ca", plan.client_ca)):
        if src is None:
            continue
        try:
            with open(src, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ConfigError(name, "cannot read %s: %s" % (src, exc.strerror)) from None
        dst = os.path.join(tls_dir, "fleet-ca.pem" if name == "client_ca" else os.path.basename(src))
        fd = os.open(dst + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                     0o600 if name == "keyfile" else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(dst + ".tmp", dst)
        copies[name] = dst
    return copies


def _hand_over(user: str, paths: list):
    """chown the broker's files to the user mosquitto drops to (only when running as root)."""
    if os.name != "posix" or os.geteuid() != 0:
        return
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ConfigError("run_as", "user %r does not exist; create it or pass --run-as" % user)
    for path in paths:
        if not os.path.exists(path):
            open(path, "a").close()
        os.chown(path, entry.pw_uid, entry.pw_gid)
