"""ldpfleet device client for MicroPython (protocol v1, protocol_spec/v2/README.md)."""
