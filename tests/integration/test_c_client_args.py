"""The C client reads its command line in one grammar (flags, and options followed by their
value): an option's value is never taken for an option or a flag, so a device value that looks
like one (`--value --once`) changes nothing but the value."""
import subprocess

from support.c_client import build_client


def run(*args):
    return subprocess.run([str(build_client()), *args], capture_output=True, text=True,
                          timeout=60)


def test_a_value_that_looks_like_an_option_is_only_a_value(tmp_path):
    # "--campaign" here is the value of --value: the command line names no campaign
    proc = run("--state-dir", str(tmp_path), "--value", "--campaign", "--port", "1")
    assert proc.returncode == 1, proc.stderr  # LDPC_EXIT_USAGE
    assert "--state-dir, --campaign and --value (or --value-file) are required" in proc.stderr, \
        proc.stderr


def test_options_after_a_flag_are_still_found(tmp_path):
    # the flag consumes nothing: --campaign after --once is read, the identity file is next
    proc = run("--once", "--campaign", "c", "--state-dir", str(tmp_path), "--value", "3")
    assert proc.returncode == 1, proc.stderr  # LDPC_EXIT_USAGE
    assert "are required" not in proc.stderr and "identity" in proc.stderr, proc.stderr
