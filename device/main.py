"""ldpfleet device entry point: identity.json + value.json (board) or arguments (unix port).
Everything lives in ldp/app.py so that it can be precompiled (.mpy): compiling source on the
device costs far more heap than loading bytecode."""
import sys

from ldp.app import main

sys.exit(main(sys.argv[1:]))
