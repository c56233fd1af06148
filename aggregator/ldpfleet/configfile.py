"""`ldpfleet.toml` and `LDPFLEET_<NAME>` environment variables as argparse defaults, for every
subcommand at once.

Precedence: a flag on the command line > the environment > the config file > the option's own
default. It is argparse's: before `parse_args`, `apply` sets each subcommand option's default
from the file, then from the environment, and the command line overrides both.

The file: `--config FILE` (anywhere on the command line), else `$LDPFLEET_CONFIG`, else
`./ldpfleet.toml` when it exists. A named file that is missing is an error. Layout::

    state = "postgresql://ldp@db/ldpfleet"   # top-level keys, or [common]: every command
    [campaign]                                # every `campaign ACTION` with the option
    broker = "mqtts://broker.example:8883"
    [campaign.create]                         # one subcommand
    valid-days = 60
    [serve]
    batch_size = 5000

Keys are an option's dest (or its long name) with dashes or underscores. A value goes through
the option's own `type=` and `choices` (errors name the file, the section and the key); switches
take true/false (1/0, yes/no, on/off); repeatable options and nargs lists take TOML arrays (env:
comma-separated). Unknown sections and keys are errors (typos). Secrets (dests ending in
password, token or key that are not file paths) are never read from the file: give
`password_file = PATH`. The environment variable of an option is `LDPFLEET_` + its dest in
upper case (LDPFLEET_STATE, LDPFLEET_BATCH_SIZE, LDPFLEET_PASSWORD_FILE ...); it applies to
every subcommand that has the option. Set but empty (`LDPFLEET_POST=`), it clears the file's
value: the option's own default applies (a flag still wins). LDPFLEET_PASSWORD keeps its own handling
(`commands.resolve_password`); set, it beats a password_file from the file."""
import argparse
import os
from dataclasses import dataclass
from typing import Any, Optional

from .core.errors import ConfigError

ENV_PREFIX = "LDPFLEET_"
CONFIG_ENV = "LDPFLEET_CONFIG"
DEFAULT_FILE = "ldpfleet.toml"
COMMON = "common"
SECRET_SUFFIXES = ("password", "token", "key")
MASK = "****"
SKIP_DESTS = {"help", "version", "config"}
TRUE = {"true", "1", "yes", "on"}
FALSE = {"false", "0", "no", "off"}


def _self_read():
    """Secret dests whose environment variable the commands read themselves (not applied as
    a default: `--password` would warn that it shows in `ps`)."""
    from .commands.common import PASSWORD_ENV
    return {PASSWORD_ENV[len(ENV_PREFIX):].lower()}


@dataclass
class Setting:
    """Where one option's value comes from (file or env), for `config check`."""
    value: Any
    source: str          # "file" or "env"
    where: str           # "ldpfleet.toml [serve] batch_size" or "LDPFLEET_BATCH_SIZE"
    rank: int = 0        # file: section depth (more specific wins)
    applied: bool = True  # False: shown only (a secret the command reads from env itself)
    error: Optional[str] = None


@dataclass
class Applied:
    """What `apply` did: the file, and per command path (("campaign", "create")) the settings."""
    path: Optional[str]
    settings: dict
    parsers: dict


def has_password(text: str) -> bool:
    """A URL with a password in its user part or a `password=` query parameter."""
    from urllib.parse import parse_qs, urlsplit
    if "://" not in text:
        return False
    try:
        parts = urlsplit(text)
        return parts.password is not None or "password" in parse_qs(parts.query)
    except ValueError:
        return False


def is_secret(action) -> bool:
    metavar = str(action.metavar or "").upper()
    path_like = any(word in metavar for word in ("FILE", "PATH", "PEM", "DIR"))
    return action.dest.endswith(SECRET_SUFFIXES) and not path_like


def is_file_option(action) -> bool:
    return action.dest.endswith("file") or "FILE" in str(action.metavar or "").upper()


def env_name(dest: str) -> str:
    return ENV_PREFIX + dest.upper()


# -- the command tree -------------------------------------------------------------------------

def command_parsers(parser, prefix=()):
    """{path: parser} of every subcommand (aliases once), intermediate ones included."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:
                    continue
                seen.add(id(sub))
                out[prefix + (name,)] = sub
                out.update(command_parsers(sub, prefix + (name,)))
    return out


def command_line_only(action):
    """Mark an option that neither the config file nor the environment may set (e.g. a
    board's own password file: a `password_file` of the file, or LDPFLEET_PASSWORD_FILE, is
    the operator's login and must never end up on a board). Returns the action."""
    action.command_line_only = True
    return action


def options(parser):
    """{dest: action} of a parser's settable options (not positionals, help, --config or
    `command_line_only` ones)."""
    return {a.dest: a for a in parser._actions
            if a.option_strings and a.dest not in SKIP_DESTS and a.dest != argparse.SUPPRESS
            and not getattr(a, "command_line_only", False)
            and not isinstance(a, (argparse._HelpAction, argparse._VersionAction,
                                   argparse._SubParsersAction))}


def _lookup(parser, key):
    """The action a file key names: its dest or a long option name, dashes or underscores."""
    norm = key.replace("-", "_")
    opts = options(parser)
    if norm in opts:
        return opts[norm]
    for action in opts.values():
        for s in action.option_strings:
            if s.startswith("--") and s[2:].replace("-", "_") == norm:
                return action
    return None


def install(parser):
    """A hidden `--config FILE` on every subcommand, so it may come after the command too
    (default SUPPRESS: never overrides the top-level one)."""
    for sub in command_parsers(parser).values():
        if "--config" not in sub._option_string_actions:
            sub.add_argument("--config", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


# -- finding and reading the file ------------------------------------------------------------

def locate(argv, environ):
    """(path, explicit) of the config file, or (None, False)."""
    argv = list(argv or [])
    for i, tok in enumerate(argv):
        if tok == "--":
            break
        if tok == "--config" and i + 1 < len(argv):
            return argv[i + 1], True
        if tok.startswith("--config="):
            return tok.split("=", 1)[1], True
    if environ.get(CONFIG_ENV):
        return environ[CONFIG_ENV], True
    if os.path.isfile(DEFAULT_FILE):
        return DEFAULT_FILE, False
    return None, False


def load(path):
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    if not os.path.exists(path):
        raise ConfigError("config", "config file %s does not exist" % path)
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError("config", "cannot read %s: %s" % (path, exc.strerror or exc)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, "not valid TOML: %s" % exc) from None


def _entries(data, tree, path):
    """(section path, key, value, where) of every option in the file; unknown sections fail."""
    out = []

    def where(section, key):
        return "%s [%s] %s" % (path, ".".join(section) or COMMON, key)

    def walk(section, table, top=False):
        for key, value in table.items():
            if isinstance(value, dict):
                if top and key == COMMON:
                    walk((), value)
                    continue
                child = section + (key,)
                if child not in tree:
                    known = sorted(".".join(p) for p in tree if p[:-1] == section)
                    raise ConfigError("%s [%s]" % (path, ".".join(child)),
                                      "unknown section (no such command; sections: %s)"
                                      % ", ".join([COMMON] * top + known))
                walk(child, value)
            else:
                out.append((section, key, value, where(section, key)))

    walk((), data, top=True)
    return out


# -- converting a value as argparse would ----------------------------------------------------

class InvalidValue(ValueError):
    """A file or environment value the option does not take, with argparse's message; the
    callers turn it into a ConfigError naming where the value came from."""


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        raise InvalidValue("a single value, got %s" % ("an array" if isinstance(value, list)
                                                      else "a table"))
    return str(value)


def _one(action, text):
    """One string through the option's type= and choices, the errors argparse would give."""
    func = action.type
    if func is None:
        value = text
    else:
        try:
            value = func(text)
        except argparse.ArgumentTypeError as exc:
            raise InvalidValue(str(exc)) from None
        except (TypeError, ValueError):
            name = getattr(func, "__name__", repr(func))
            raise InvalidValue("invalid %s value: %r" % (name, text)) from None
    if action.choices is not None and value not in action.choices:
        raise InvalidValue("invalid choice: %r (choose from %s)"
                         % (value, ", ".join(repr(c) for c in action.choices)))
    return value


def _is_list(action):
    return (isinstance(action, (argparse._AppendAction, argparse._ExtendAction))
            or action.nargs in ("*", "+") or (isinstance(action.nargs, int) and action.nargs > 1))


def convert(action, value, from_env=False):
    """A file or env value as the option's dest value; InvalidValue with argparse's message."""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction,
                           argparse.BooleanOptionalAction)):
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in TRUE:
            return True
        if word in FALSE:
            return False
        raise InvalidValue("true or false, got %r" % (value,))
    if isinstance(action, argparse._CountAction):
        return _one(argparse.Action([], "n", type=int), _text(value))
    if isinstance(action, (argparse._StoreConstAction, argparse._AppendConstAction)):
        raise InvalidValue("cannot be set from a config file or the environment")
    if _is_list(action):
        if isinstance(value, list):
            items = value
        elif from_env:
            items = [t.strip() for t in str(value).split(",") if t.strip()]
        else:
            items = [value]
        if isinstance(action.nargs, int) and not _is_append(action):
            if len(items) != action.nargs:
                raise InvalidValue("%d values, got %d" % (action.nargs, len(items)))
        return [_one(action, _text(v)) for v in items]
    return _one(action, _text(value))


def _is_append(action):
    return isinstance(action, (argparse._AppendAction, argparse._ExtendAction))


# -- applying ----------------------------------------------------------------------------------

def invoked_path(argv, tree):
    """The command path the command line runs, e.g. ("campaign", "create")."""
    path = ()
    words = list(argv or [])
    i = 0
    while i < len(words):
        tok = words[i]
        if tok == "--config":
            i += 2
            continue
        if tok.startswith("-"):
            i += 1
            continue
        if path + (tok,) in tree:
            path = path + (tok,)
            i += 1
            continue
        break
    return path


def collect(parser, argv, environ=None):
    """The settings of the file and the environment, checked, not yet applied."""
    environ = os.environ if environ is None else environ
    tree = command_parsers(parser)
    path, _explicit = locate(argv, environ)
    data = load(path) if path else {}
    settings = {p: {} for p in tree}
    self_read = _self_read()

    for section, key, value, where in _entries(data, tree, path):
        targets = [(p, _lookup(sub, key)) for p, sub in tree.items() if p[:len(section)] == section]
        targets = [(p, a) for p, a in targets if a is not None]
        if not targets:
            raise ConfigError(where, "unknown option (no command%s has --%s)"
                              % (" under [%s]" % ".".join(section) if section else "",
                                 key.replace("_", "-")))
        for p, action in targets:
            if is_secret(action):
                raise ConfigError(where, "secrets are not read from the config file: give "
                                  "%s_file = PATH (a file only this service can read) or the "
                                  "%s environment variable" % (action.dest, env_name(action.dest)))
            if isinstance(value, str) and has_password(value):
                raise ConfigError(where, "secrets are not read from the config file: this URL "
                                  "carries a password (PostgreSQL: ~/.pgpass or PGPASSFILE)")
            try:
                converted = convert(action, value)
            except InvalidValue as exc:
                raise ConfigError(where, str(exc)) from None
            old = settings[p].get(action.dest)
            if old is None or old.rank <= len(section):
                settings[p][action.dest] = Setting(converted, "file", where, rank=len(section))

    running = invoked_path(argv, tree)
    for p, sub in tree.items():
        on_path = running[:len(p)] == p
        for dest, action in options(sub).items():
            name = env_name(dest)
            if name not in environ:
                continue
            if environ[name] == "":
                old = settings[p].get(dest)
                if old is not None and old.source == "file" and not is_secret(action):
                    settings[p][dest] = Setting(action.default, "env",
                                                "%s= (empty: clears %s)" % (name, old.where),
                                                applied=False)
                continue
            if is_secret(action):
                if dest in self_read and dest + "_file" not in options(sub):
                    continue  # e.g. flash --password: a device's, never the operator's login
                if dest in self_read:
                    settings[p][dest] = Setting(MASK, "env", name, applied=False)
                    file_given = settings[p].get(dest + "_file")
                    if file_given is not None and file_given.source == "file":
                        del settings[p][dest + "_file"]  # env beats the file
                    continue
            try:
                converted = convert(action, environ[name], from_env=True)
            except InvalidValue as exc:
                if on_path:
                    raise ConfigError("environment %s" % name, str(exc)) from None
                settings[p][dest] = Setting(None, "env", name, applied=False, error=str(exc))
                continue
            settings[p][dest] = Setting(converted, "env", name)
            if is_secret(action):
                file_given = settings[p].get(dest + "_file")
                if file_given is not None and file_given.source == "file":
                    del settings[p][dest + "_file"]
    return Applied(path, settings, tree)


class _ConfigAppend(argparse._AppendAction):
    """An append option whose default came from the file/env: the first flag replaces it."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is self.default:
            setattr(namespace, self.dest, [])
        super().__call__(parser, namespace, values, option_string)


class _ConfigExtend(argparse._ExtendAction):
    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is self.default:
            setattr(namespace, self.dest, [])
        super().__call__(parser, namespace, values, option_string)


def apply(parser, argv, environ=None):
    """Set every subcommand's defaults from the config file and the environment (see the
    module docstring). ConfigError (exit 2) for a missing named file, bad TOML, unknown
    sections or keys, inline secrets, and invalid values."""
    applied = collect(parser, argv, environ)
    for p, sub in applied.parsers.items():
        opts = options(sub)
        given = {d for d, s in applied.settings[p].items() if s.applied}
        for dest in given:
            action = opts[dest]
            action.default = applied.settings[p][dest].value
            if dest in sub._defaults:
                sub._defaults[dest] = action.default
            action.required = False
            if type(action) is argparse._AppendAction:
                action.__class__ = _ConfigAppend
            elif type(action) is argparse._ExtendAction:
                action.__class__ = _ConfigExtend
        for group in sub._mutually_exclusive_groups:
            if group.required and any(a.dest in given for a in group._group_actions):
                group.required = False
    return applied
