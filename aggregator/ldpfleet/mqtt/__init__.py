"""ldpfleet.mqtt."""
