"""ldpfleet device client for MicroPython (protocol v1, protocol_spec/v1/README.md)."""
