"""ldpfleet.broker."""
