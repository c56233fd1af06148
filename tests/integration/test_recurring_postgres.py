"""A recurring campaign's ingest on PostgreSQL (protocol_spec/v2 §3.4): the scenario of
tests/unit/test_recurring_ingest.py (rounds in their own slots, per-round dedupe across a
restart, flags and round refusals, each round's sketch exact) on a throw-away database."""
from test_recurring_ingest import run_scenario


def test_recurring_campaign_on_postgresql(postgres_url, tmp_path):
    run_scenario(postgres_url, tmp_path)
