"""ldpfleet device client for MicroPython (protocol v2, protocol_spec/v2/README.md)."""
