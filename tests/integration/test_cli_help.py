"""Every command explains itself: `ldpfleet --help` opens with whole sentences, every
subcommand has a description, plan and simulate document every option, and no help text points
to a file that is not in the repository."""
import argparse
import re
import subprocess

from ldpfleet import cli
from support.devices import SIGNING_KEY  # noqa: F401  (tests/ on the path)
from ldpfleet.provision import device_runner

OUTSIDE = re.compile(r"field-notes|/work/shared|shared/papers|\.\./shared|module docstring")


def subcommands(parser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield prefix + (name,), sub
                yield from subcommands(sub, prefix + (name,))


def test_top_level_help_is_whole_sentences():
    parser, broken = cli.build_parser()
    assert not broken
    text = parser.format_help()
    description = parser.description
    assert description and description.rstrip().endswith(".") and "each subcommand family" not in text


def test_every_subcommand_describes_itself_and_points_only_inside_the_repo():
    parser, _ = cli.build_parser()
    seen = 0
    for path, sub in subcommands(parser):
        seen += 1
        text = sub.format_help()
        assert not OUTSIDE.search(text), (path, OUTSIDE.search(text).group(0))
        has_children = any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)
        if not has_children:
            assert sub.description or any(a.help for a in sub._actions if a.option_strings), path
    assert seen >= 15


def test_plan_and_simulate_document_every_option():
    parser, _ = cli.build_parser()
    subs = dict((p, s) for p, s in subcommands(parser))
    for name in (("plan",), ("simulate",)):
        sub = subs[name]
        assert sub.description, name
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, (name, action.option_strings)


def test_device_main_help_exits_0():
    """`main.py --help` on the MicroPython device used to exit 1."""
    proc = subprocess.run([device_runner.micropython_binary(), str(device_runner.DEVICE_DIR / "main.py"),
                           "--help"], env=device_runner.micropython_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: main.py"), proc.stdout + proc.stderr
