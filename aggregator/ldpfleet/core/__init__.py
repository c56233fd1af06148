"""ldpfleet.core."""
