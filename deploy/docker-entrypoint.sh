#!/bin/sh
# Entry point of deploy/Dockerfile: `ldpfleet ARGS...`. The PostgreSQL password comes from a
# file (a compose/Docker secret) named by PGPASSWORD_FILE, handed to libpq as PGPASSWORD, so
# the state URL (--state postgresql://USER@HOST/DB) and `ps` never show it.
set -e
if [ -n "${PGPASSWORD_FILE:-}" ] && [ -z "${PGPASSWORD:-}" ]; then
    PGPASSWORD="$(head -n 1 "$PGPASSWORD_FILE")"
    export PGPASSWORD
fi
unset PGPASSWORD_FILE
exec ldpfleet "$@"
