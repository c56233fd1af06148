"""`ldpfleet config check [--config FILE] [--json] [COMMAND [OPTIONS ...]]`: every option's
effective value and where it comes from (flag, env, file, default), secrets masked
(ldpfleet.configfile does the work for every command)."""
import argparse
import json
import os
import sys

_UNSET = object()


def register(subparsers):
    c = subparsers.add_parser(
        "config", help="check the configuration file and LDPFLEET_* environment variables",
        description="ldpfleet.toml (--config FILE, $LDPFLEET_CONFIG or ./ldpfleet.toml) and "
                    "LDPFLEET_<NAME> environment variables give every subcommand's options; a "
                    "flag beats the environment, which beats the file.")
    csub = c.add_subparsers(dest="config_command", metavar="ACTION")
    ck = csub.add_parser(
        "check", help="print the effective options and their sources, secrets masked",
        description="Reads the config file and the environment as every command does (an "
                    "invalid file fails here, exit 2, naming the file, section and key) and "
                    "prints, per command, each option's effective value and its source: flag, "
                    "env, file or default. Secrets show as ****, *_file options as their path "
                    "and whether it is readable. COMMAND (e.g. serve, or campaign create) limits "
                    "it to one command; options after it are shown as flags.")
    ck.add_argument("--config", default=argparse.SUPPRESS, metavar="FILE",
                    help="the config file (else $LDPFLEET_CONFIG, else ./ldpfleet.toml)")
    ck.add_argument("--json", action="store_true", help="one JSON object")
    ck.add_argument("words", nargs=argparse.REMAINDER, metavar="COMMAND ...",
                    help="a command (serve, estimate, campaign create, ...) and its options")
    ck.set_defaults(func=run_check)
    c.set_defaults(func=lambda args: c.print_help() or 2)


def _mask_url(text):
    """A URL's password (user part or `password=` query parameter) as ****."""
    import re
    from urllib.parse import urlsplit, urlunsplit
    if "://" not in text:
        return text
    try:
        parts = urlsplit(text)
        query = re.sub(r"(^|&)(password=)[^&]*", r"\1\2****", parts.query)
        if parts.password is None and query == parts.query:
            return text  # (urlunsplit would also rewrite sqlite:///x as sqlite:/x)
        if parts.password is not None:
            host = parts.netloc.rsplit("@", 1)[1]
            parts = parts._replace(netloc="%s:%s@%s" % (parts.username, "****", host))
        return urlunsplit(parts._replace(query=query))
    except ValueError:
        return text


def _shown(action, value):
    from ..configfile import MASK, is_secret
    if value is None:
        return None
    if is_secret(action):
        return MASK
    if isinstance(value, str):
        return _mask_url(value)
    if isinstance(value, (list, tuple)):
        return [_mask_url(v) if isinstance(v, str) else v for v in value]
    if isinstance(value, (int, float, bool)):
        return value
    return str(value)


def _flags(sub, rest):
    """{dest: value} of the options given in `rest` (parsed by the command's own parser)."""
    from ..configfile import options
    if not rest:
        return {}
    for action in sub._actions:
        action.required = False
        if action.dest != "help":
            action.default = _UNSET
    for group in sub._mutually_exclusive_groups:
        group.required = False
    sub._defaults.clear()
    ns = sub.parse_args(rest)
    return {d: getattr(ns, d) for d in options(sub)
            if getattr(ns, d, _UNSET) is not _UNSET}


def run_check(args):
    from .. import cli, configfile
    words = list(args.words)
    if words[:1] == ["--"]:
        words = words[1:]
    parser, _ = cli.build_parser()
    located, _ = configfile.locate(words, os.environ)  # a --config among the words
    config = getattr(args, "config", None) or (located if "--config" in " ".join(words) else None)
    # no command words: a bad environment value is reported per option, not raised
    applied = configfile.apply(parser, ["--config", config] if config else [])
    tree = applied.parsers
    target = configfile.invoked_path(words, tree)
    rest = words[len(target):]
    if not target and rest:
        raise_unknown(rest[0], tree)
    paths = [p for p in tree if p[:len(target)] == target and configfile.options(tree[p])
             and p[:1] != ("config",)]
    if target and target not in paths:
        paths.insert(0, target)
    leaf = tree[target] if target else None
    defaults = {p: {d: a.default for d, a in configfile.options(tree[p]).items()} for p in paths}
    flags = _flags(leaf, rest) if leaf is not None else {}

    problems = []
    report = {}
    for p in paths:
        rows = {}
        settings = applied.settings[p]
        for dest, action in configfile.options(tree[p]).items():
            setting = settings.get(dest)
            if p == target and dest in flags:
                value, source, where = flags[dest], "flag", None
            elif setting is not None and (setting.applied or setting.error):
                value, source, where = setting.value, setting.source, setting.where
            elif setting is not None:  # a secret the command reads from env itself
                value, source, where = setting.value, setting.source, setting.where
            else:
                value, source, where = defaults[p][dest], "default", None
            row = {"value": _shown(action, value), "source": source}
            if where:
                row["from"] = where
            if setting is not None and setting.error and source == "env":
                row["error"] = setting.error
                problems.append("%s: %s: %s" % (" ".join(p), where, setting.error))
            if configfile.is_file_option(action) and isinstance(value, str):
                row["readable"] = os.path.isfile(value) and os.access(value, os.R_OK)
            if value is None and (action.required or _required_in_group(tree[p], action)):
                row["required"] = True
            rows[dest] = row
        _implied_tls(rows)
        report[" ".join(p)] = rows
    if args.json:
        print(json.dumps({"config_file": applied.path, "commands": report}, sort_keys=True))
    else:
        _print_text(applied.path, report)
    for line in problems:
        print("ldpfleet: error: %s" % line, file=sys.stderr)
    return 2 if problems else 0


def _implied_tls(rows: dict):
    """`tls` as the command will run: an mqtts:// broker or a CA file implies it (the rule of
    `mqtt.uses_tls`), whatever the --tls switch says."""
    from ..mqtt.client import uses_tls
    tls, broker, cafile = rows.get("tls"), rows.get("broker"), rows.get("cafile")
    if tls is None or tls["value"] or broker is None or not broker["value"]:
        return
    if uses_tls(broker["value"], False, cafile["value"] if cafile else None):
        implied_by = ("broker %s" % broker["value"] if uses_tls(broker["value"])
                      else "cafile %s" % cafile["value"])
        rows["tls"] = {"value": True, "source": "implied", "from": implied_by}


def _required_in_group(sub, action):
    return any(g.required and action in g._group_actions for g in sub._mutually_exclusive_groups)


def raise_unknown(word, tree):
    from ..core.errors import ConfigError
    raise ConfigError("COMMAND", "no command %r (commands: %s)"
                      % (word, ", ".join(sorted({p[0] for p in tree}))))


def _print_text(path, report):
    print("config file: %s" % (path or "(none: no --config, $LDPFLEET_CONFIG or ./ldpfleet.toml)"))
    for command, rows in report.items():
        print("\n[%s]" % command.replace(" ", "."))
        width = max((len(d) for d in rows), default=0)
        for dest, row in rows.items():
            value = row["value"]
            text = "(not set)" if value is None else json.dumps(value)
            notes = [row["source"] + (" " + row["from"] if row.get("from") else "")]
            if "readable" in row:
                notes.append("readable" if row["readable"] else "NOT READABLE")
            if row.get("required"):
                notes.append("required: give it on the command line")
            if row.get("error"):
                notes.append("ERROR: " + row["error"])
            print("  %-*s = %-24s  %s" % (width, dest, text, "; ".join(notes)))
