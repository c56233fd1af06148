"""The campaign as a device sees it: the retained, signed config (and status and phase-2
message) read from the broker and verified with the trusted public keys (spec §5.1), after
the retained key rotation on `ldpfleet/keys` as a device applies it (spec §5.3)."""
import threading
import uuid
from dataclasses import dataclass

from ..core import config as campaign_config
from ..mqtt import client as mqtt
from ..core import signing
from ..core.errors import ConfigError

CONFIG_TIMEOUT = 10.0
KEYS_TOPIC = "ldpfleet/keys"


@dataclass
class CampaignView:
    """What a device learns from the broker: the verified config, the current phase and, in
    phase 2, the verified phase-2 message."""

    config: dict
    phase: int
    phase2: dict = None
    status: dict = None


def _retained(broker: mqtt.BrokerSettings, campaign: str, timeout: float) -> dict:
    """{leaf: payload} of the campaign's retained config, status and phase-2 message, and of
    the retained key rotation (`keys`)."""
    retained = {}
    topics = {leaf: "ldp/%s/%s" % (campaign, leaf) for leaf in ("config", "status", "phase2")}
    topics["keys"] = KEYS_TOPIC
    subacks = []
    barrier = threading.Event()

    def on_message(_c, _userdata, msg):
        retained[msg.topic] = msg.payload

    def on_subscribe(_c, _userdata, mid, _reason_codes, _properties):
        subacks.append(mid)
        if len(subacks) == 2:
            barrier.set()

    client = broker.make_client("ldpfleet-fetch-%s" % uuid.uuid4().hex[:12],
                                protocol=mqtt.PROTOCOLS[4])
    client.on_message = on_message
    client.on_subscribe = on_subscribe
    mqtt.start(client, broker)
    try:
        # the key rotation first, as a device subscribes (spec §5.3)
        client.subscribe([(topics["keys"], 1), (topics["config"], 1), (topics["status"], 0),
                          (topics["phase2"], 1)])
        # Mosquitto queues a subscription's retained messages while it handles the SUBSCRIBE,
        # and handles one client's packets in order: once a second SUBSCRIBE is acknowledged,
        # every retained message of the first has arrived (its SUBACK may be a refusal).
        client.subscribe("ldp/%s/config/barrier" % campaign, 0)
        if not barrier.wait(timeout):
            raise ConnectionError("no SUBACK from %s within %.0f s" % (broker.url, timeout))
    finally:
        client.disconnect()
        client.loop_stop()
    if topics["config"] not in retained:
        raise ConfigError("config", "no retained config on %s (is the campaign created?)"
                          % topics["config"])
    return {leaf: retained.get(topic) for leaf, topic in topics.items()}


def fetch_campaign(broker, campaign: str, trusted_keys, phase: int = None,
                   timeout: float = CONFIG_TIMEOUT) -> CampaignView:
    """Read the retained config (and status, phase 2) of `campaign`; verify the signatures.
    `broker`: URL or BrokerSettings."""
    broker = mqtt.as_settings(broker)
    if not campaign_config.NAME_RE.match(campaign):
        raise ConfigError("campaign", "name must match [A-Za-z0-9_-]{1,64}")
    retained = _retained(broker, campaign, timeout)
    trusted_keys = follow_rotation(retained["keys"], trusted_keys)
    doc = campaign_config.verify(retained["config"], trusted_keys)
    if doc.get("type") == "close":
        campaign_config.check_close(doc)
        raise ConfigError("campaign", "campaign %s (id %d) is closed: its devices no longer report"
                          % (campaign, doc["campaign_id"]))
    doc = campaign_config.check_config(doc)
    if doc["campaign"] != campaign:
        raise ConfigError("campaign", "config on ldp/%s/config names campaign %r"
                          % (campaign, doc["campaign"]))
    status = None
    if retained["status"] is not None:  # signed like the config (spec §5.4); else ignored
        try:
            status = campaign_config.verify(retained["status"], trusted_keys)
        except ConfigError:
            status = None
    if phase is None:
        phase = int(status.get("phase", 1)) if isinstance(status, dict) else 1
    if not 1 <= phase <= len(doc["phases"]):
        raise ConfigError("phase", "campaign %s has no phase %d" % (campaign, phase))
    phase2 = None
    if phase == 2:
        if retained["phase2"] is None:
            raise ConfigError("phase2", "campaign %s is in phase 2 but ldp/%s/phase2 holds no "
                              "message" % (campaign, campaign))
        phase2 = campaign_config.verify(retained["phase2"], trusted_keys)
        if phase2.get("type") != "phase2" or phase2.get("campaign_id") != doc["campaign_id"]:
            raise ConfigError("phase2", "phase-2 message does not belong to this campaign")
        campaign_config.check_phase2_choice(doc, phase2)
    return CampaignView(doc, phase, phase2, status)


def follow_rotation(payload, trusted_keys):
    """The trusted keys after the retained key rotation `payload` (spec §5.3), as a device
    holding `trusted_keys` at serial 0 applies it: a rotation that verifies under them and
    passes `check_keys` replaces them with its whole set; none, or one that does not verify
    (e.g. signed by a key the caller no longer trusts), leaves them as they are."""
    if payload is None:
        return trusted_keys
    try:
        doc = campaign_config.check_keys(campaign_config.verify(payload, trusted_keys))
    except ConfigError:
        return trusted_keys
    return [signing.PublicKey.from_doc(k) for k in doc["keys"]]


def phase_mechanism(view: CampaignView):
    """The Mechanism a device uses in the view's phase (phase 2 gets LDPMiner's candidates;
    LDPLCM's model is no parameter: it decides each device's `high`; svim's flat branch,
    `"fallback": true`, the config's fallback over the whole domain, spec §5.4)."""
    if view.phase == 2 and campaign_config.is_fallback(view.phase2):
        return campaign_config.mechanism_for_phase(view.config, 2, fallback=True)
    name = view.config["phases"][view.phase - 1]["mechanism"]
    extra = campaign_config.phase2_inputs(name, view.phase2) if view.phase2 else {}
    return campaign_config.mechanism_for_phase(view.config, view.phase, **extra)
