"""`ldpfleet broker-check`: would the broker drop reports for a slow aggregator
(broker/check.py)."""
import json

from .common import broker_args, broker_settings, positive_int


def register(subparsers):
    bc = subparsers.add_parser(
        "broker-check", help="measure whether the broker would drop reports for a slow aggregator",
        description="A persistent QoS 1 session stops acknowledging, --messages QoS 1 messages "
                    "are published to it, the session returns and counts what the broker kept. "
                    "Exit 0 when every message was kept, 4 when the broker dropped some (it then "
                    "prints the settings to change), 3 when it cannot be reached. One login, one "
                    "client id: on broker-config's broker use the admin login (never serve's "
                    "while serve runs); its ACL allows ldpfleet/check/#.")
    broker_args(bc)
    bc.add_argument("--messages", type=positive_int, default=2000,
                    help="burst size to check (default 2000, twice Mosquitto's default queue; "
                         "give your largest burst: devices x phases)")
    bc.add_argument("--payload-bytes", type=positive_int, default=64,
                    help="message size (default 64; use your campaigns' report size)")
    bc.add_argument("--json", action="store_true")
    bc.set_defaults(func=run_broker_check)


def run_broker_check(args):
    from ..broker.check import check_broker
    result = check_broker(broker_settings(args), messages=args.messages, payload_bytes=args.payload_bytes)
    if args.json:
        print(json.dumps(result.to_json(), sort_keys=True))
    else:
        print(result.summary())
    return 0 if result.passed else 4
