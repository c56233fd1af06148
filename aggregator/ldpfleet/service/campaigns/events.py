"""Who changed a campaign, and from where: each create, advance (phase 2) and close made
through the CLI or the HTTP API is recorded in the state's `meta` table (one insert-only row
per event: `lifecycle:<campaign>:<time>:<random>`, JSON), and `serve` logs every event it has
not logged yet (service/ingest/progress.py), whichever process made it.

Origins: `cli USER@HOST` (the operator's account on the machine that ran the command) or `api
token NAME` (the name of the bearer token in serve's token file, http_api.ApiTokens).
"""
import getpass
import json
import os
import socket
import time

PREFIX = "lifecycle:"


def cli_origin() -> str:
    """`cli USER@HOST` of this process."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 (no login name: a container's numeric uid)
        user = "uid%d" % os.getuid()
    return "cli %s@%s" % (user, socket.gethostname())


def api_origin(token_name: str) -> str:
    return "api token %s" % token_name


def record(store, name: str, action: str, origin: str, detail: str = None):
    """Record one event of campaign `name` (its phase and state as they are now)."""
    camp = store.require_campaign(name)
    now = time.time()
    event = {"campaign": name, "action": action, "origin": origin, "at": now,
             "phase": camp.phase, "state": camp.state}
    if detail:
        event["detail"] = detail
    key = "%s%s:%020d:%s" % (PREFIX, name, int(now * 1e9), os.urandom(4).hex())
    store.set_meta(key, json.dumps(event, sort_keys=True))


def events(store) -> dict:
    """{key: event} of every recorded event."""
    rows = store.db.execute("SELECT key, value FROM meta WHERE key LIKE ?",
                            (PREFIX + "%",)).fetchall()
    out = {}
    for key, value in rows:
        try:
            out[key] = json.loads(value)
        except ValueError:
            continue
    return out


def describe(event: dict) -> str:
    """One log line: `campaign NAME closed by cli alice@ops-1 (...)`."""
    action = event.get("action")
    what = {"create": "created (phase %(phase)s)", "advance": "advanced to phase %(phase)s",
            "phase2": "moved to phase %(phase)s (phase-2 message published by hand)",
            "close": "closed"}.get(action, str(action))
    text = "campaign %s %s by %s" % (event.get("campaign"), what % event, event.get("origin"))
    if event.get("detail"):
        text += " (%s)" % event["detail"]
    return text


def advance_detail(out: dict) -> str:
    """What an advance decided (protocol_campaigns.advance_campaign's answer), in a few words."""
    n = out.get("phase1_reports", 0)
    if out.get("branch") == "flat":
        return "svim flat branch from %d phase-1 reports" % n
    if "candidates" in out:
        return "%d candidates from %d phase-1 reports" % (len(out["candidates"]), n)
    if "model_nodes" in out:
        return "model of %d nodes from %d phase-1 reports" % (out["model_nodes"], n)
    return "from %d phase-1 reports" % n
