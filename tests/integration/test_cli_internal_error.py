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


def test_an_unreachable_postgresql_state_is_the_environment(tmp_path):
    """Exit 4 (not 2: the command line was right; not 70: no bug), one line naming the server."""
    from ldpfleet.broker.embedded import free_port
    url = "postgresql://ldp@127.0.0.1:%d/ldp" % free_port()  # nothing listens there
    proc = ldpfleet("campaign", "list", "--state", url, cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.startswith("ldpfleet: error: state: cannot connect to PostgreSQL at "), \
        proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_model_file_that_is_not_json_is_bad_input(tmp_path):
    (tmp_path / "model.json").write_text("{not json")
    proc = ldpfleet("campaign", "phase2", "lcm", "--state", tmp_path / "s.db", "--broker",
                    "mqtt://127.0.0.1:1", "--model-file", tmp_path / "model.json",
                    "--signing-key", tmp_path / "k.key", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("ldpfleet: error: model_file: "), proc.stderr
