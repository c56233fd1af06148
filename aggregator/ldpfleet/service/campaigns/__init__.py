"""ldpfleet.service.campaigns."""
