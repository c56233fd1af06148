"""ldpfleet.service.http."""
