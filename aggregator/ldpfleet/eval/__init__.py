"""ldpfleet.eval."""
