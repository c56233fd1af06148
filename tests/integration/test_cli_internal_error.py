"""`ldpfleet` as a process: a bug inside a command (an untyped exception) exits 70 with its
traceback on stderr, bad input exits 2 with one line naming the field."""
import subprocess
import sys

INTERNAL_LINE = "ldpfleet: internal error (a bug: please report it with the traceback above)"

BROKEN_PLAN = """
import sys
from ldpfleet import cli
import ldpfleet.commands.plan as plan_command

def plan(*args, **kwargs):
    return {}["recommended"]  # a bug: a KeyError deep inside the command

plan_command.plan = plan
sys.exit(cli.main(sys.argv[1:]))
"""


def ldpfleet(*args, code=None, cwd=None):
    argv = [sys.executable] + (["-c", code] if code else ["-m", "ldpfleet.cli"])
    return subprocess.run(argv + [str(a) for a in args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_a_bug_exits_70_with_its_traceback(tmp_path):
    proc = ldpfleet("plan", "--epsilon", 1, "--domain", 100, "--users", 1000, code=BROKEN_PLAN,
                    cwd=tmp_path)
    assert proc.returncode == 70, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert "Traceback (most recent call last):" in lines, proc.stderr
    assert lines[-2] == "KeyError: 'recommended'" and lines[-1] == INTERNAL_LINE, proc.stderr
    assert "ldpfleet: error" not in proc.stderr


def test_bad_input_exits_2_naming_the_field(tmp_path):
    proc = ldpfleet("plan", "--epsilon", 1, "--domain", 100, "--users", 0, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "ldpfleet: error: users: must be >= 1, got 0\n", proc.stderr
