"""The `ldpfleet` command line: one module per top-level command, each with
`register(subparsers)` (ldpfleet.cli lists them); what they share is in `common`."""
