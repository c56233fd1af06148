"""ldpfleet.service.state."""
