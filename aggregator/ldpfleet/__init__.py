"""ldpfleet: local differential privacy telemetry for device fleets."""
__version__ = "0.1.0"
