"""`ldpfleet devices silent CAMPAIGN`: the provisioned devices without an accepted report
(service/campaigns/coverage.py)."""
import json

from .common import open_store, state_arg


def register(subparsers):
    d = subparsers.add_parser("devices", help="the provisioned fleet seen from the state")
    dsub = d.add_subparsers(dest="devices_command", metavar="ACTION")
    si = dsub.add_parser(
        "silent", help="provisioned devices without an accepted report in a campaign",
        description="Lists the devices of --devices-file (one id per line, broker-config's "
                    "list) that the campaign asks to report in an open phase and that have "
                    "no accepted report there: boards that are off, cannot reach the broker, "
                    "were refused or lost their identity. Per phase where devices report in "
                    "several (LDPMiner asks every device in both phases; LDPLCM and svim split "
                    "them by a public rule of their id). The state holds no device ids, only "
                    "keyed hashes: each provisioned id is hashed and looked up. Whether a "
                    "device reported does not depend on its value (a device reports whatever "
                    "its value, spec §7.1), so this list reveals nothing about values.")
    si.add_argument("name", help="campaign")
    state_arg(si)
    si.add_argument("--devices-file", required=True, metavar="FILE",
                    help="the provisioned fleet, one device id per line")
    si.add_argument("--json", action="store_true")
    si.set_defaults(func=run_silent)
    d.set_defaults(func=lambda args: d.print_help() or 2)


def coverage_line(cov) -> str:
    """`campaign status`'s coverage line."""
    if cov is None:
        return "coverage unknown: the dedupe keys were purged"
    if cov["provisioned"] is None:
        return ("devices with an accepted report: %d (--devices-file FILE: coverage of the fleet)"
                % cov["reported"])
    ratio = "%.1f%%" % (100 * cov["ratio"]) if cov["ratio"] is not None else "-"
    return ("coverage: %d of %d provisioned devices reported (%s); `ldpfleet devices silent` "
            "lists the others" % (cov["reported"], cov["provisioned"], ratio))


def run_silent(args):
    from ..service.campaigns.coverage import ProvisionedFleet, silent_devices
    fleet = ProvisionedFleet(args.devices_file)
    with open_store(args, create=False) as store:
        out = silent_devices(store, args.name, fleet)
    if args.json:
        print(json.dumps(out, sort_keys=True))
        return 0
    print("campaign %s (%s, phase %d): %d of %d provisioned devices reported, %d silent in "
          "every open phase" % (out["campaign"], out["state"], out["phase"], out["reported"],
                               out["provisioned"], len(out["silent"])))
    several = len(out["phases"]) > 1
    for ph in out["phases"]:
        if not ph["open"]:
            print("phase %d: not open yet (%d devices will be asked)" % (ph["phase"], ph["expected"]))
            continue
        if several:
            print("phase %d: %d of %d asked devices reported, %d silent" % (
                ph["phase"], ph["reported"], ph["expected"], len(ph["silent"])))
        for device in ph["silent"]:
            print(("  " if several else "") + device)
    return 0
