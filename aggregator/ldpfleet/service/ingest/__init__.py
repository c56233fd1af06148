"""ldpfleet.service.ingest."""
