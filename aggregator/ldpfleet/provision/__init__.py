"""ldpfleet.provision."""
