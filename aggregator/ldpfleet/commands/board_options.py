"""The board options `flash` and `provision` share (boards.BoardOptions), and the device logins
of broker-config's credentials.csv."""
import sys

from ..provision import boards
from ..provision.boards import BOARD_MARCHES, BoardOptions, Login
from ..core.config import NAME_RE
from ..core.errors import ConfigError
from .common import tcp_port


def add_board_args(p):
    """The options every board of a fleet shares (boards.BoardOptions)."""
    p.add_argument("--trusted-keys", default=None, metavar="FILE",
                   help="the public key(s) the board trusts: PATH.pub from `campaign keygen PATH` "
                        "(a JSON list of up to 8 keys is taken too)")
    p.add_argument("--march", default="xtensawin", choices=BOARD_MARCHES,
                   help="mpy-cross architecture: xtensawin (ESP32), armv6m (RP2040), "
                        "armv7emsp (Cortex-M4F/M7 boards), x64 (unix port); default xtensawin")
    p.add_argument("--eps-cap", type=float, default=4.0,
                   help="the device's own per-report ε cap (nats, multiple of 0.001; default 4)")
    p.add_argument("--budget", type=float, default=40.0,
                   help="the device's lifetime ε budget (nats; default 40)")
    p.add_argument("--broker-host", default=None,
                   help="the broker the board connects to (required: identity.json names it)")
    p.add_argument("--broker-port", type=tcp_port, default=None, help="default 1883, 8883 with --broker-ca")
    p.add_argument("--broker-ca", default=None, metavar="PEM",
                   help="CA certificate of the broker's TLS certificate: copied to the board as "
                        "ca.der; the device then connects over TLS and verifies the broker's "
                        "certificate and host name")
    p.add_argument("--client-ca", default=None, metavar="PEM",
                   help="the fleet CA: issue the board a client certificate (CN = device id) "
                        "and key, copied as client.der / client.key.der; the board logs in with "
                        "them instead of a password (needs --broker-ca and --client-ca-key)")
    p.add_argument("--client-ca-key", default=None, metavar="PEM", help="the fleet CA's key")
    p.add_argument("--ack-key", default=None, metavar="FILE",
                   help="the fleet's ack root key (`ldpfleet ack-key init FILE`): the board gets its "
                        "own acknowledgement key (identity.json ack_key, spec §6) and accepts only "
                        "acks MAC'd under it (serve --ack-key); never the root key itself")
    p.add_argument("--wifi-ssid", default=None)
    p.add_argument("--wifi-password-file", default=None, metavar="FILE",
                   help="the Wi-Fi password, first line of FILE")


def warn(text: str):
    print("ldpfleet: warning: %s" % text, file=sys.stderr)


def board_options(args) -> BoardOptions:
    """The shared board options of `flash` / `provision` (trusted keys read, secrets from files)."""
    from ..core.ackkeys import read_key_file
    from ..core.signing import read_public_keys
    if not args.trusted_keys:
        raise ConfigError("trusted_keys", "--trusted-keys PATH.pub is required (the keys the "
                          "board trusts)")
    wifi_password = None
    if args.wifi_password_file:
        wifi_password = boards.read_secret_file(args.wifi_password_file, "wifi_password_file")
    elif getattr(args, "wifi_password", None) is not None:
        warn("--wifi-password is visible in the process list; use --wifi-password-file")
        wifi_password = args.wifi_password
    return BoardOptions(trusted_keys=read_public_keys(args.trusted_keys),
                        broker_host=args.broker_host, march=args.march, eps_cap=args.eps_cap,
                        budget=args.budget, broker_port=args.broker_port,
                        broker_ca=args.broker_ca, client_ca=args.client_ca,
                        client_ca_key=args.client_ca_key, wifi_ssid=args.wifi_ssid,
                        wifi_password=wifi_password,
                        credentials=getattr(args, "credentials", None),
                        ack_root=read_key_file(args.ack_key) if getattr(args, "ack_key", None)
                        else None).check()


def device_logins(path: str) -> dict:
    """{device id: Login} of the device rows of a credentials.csv."""
    from ..broker.secured import read_device_logins
    logins = {}
    for user, password in read_device_logins(path, field="credentials"):
        if not NAME_RE.match(user):
            raise ConfigError("credentials", "%s: device %r is not a device id "
                              "([A-Za-z0-9_-]{1,64})" % (path, user))
        logins[user] = Login(user, password)
    return logins
