"""Defaults a user keeps instead of repeating them: `~/.config/chipswap/config.toml` ($XDG_CONFIG_HOME
respected), a project `chipswap.toml` (the current folder or a parent, up to the repository root or the home
folder), and `CHIPSWAP_*` environment variables, for the keys in KEYS (region, catalog file, day rate,
candidates, serving stacks). Precedence: flag > environment > project > user > built-in; `settings()` is the
one function commands call, `chipswap config show` prints what it found and where each value came from.

A project file is trusted the way git trusts a repository (`safe.directory`): one found by walking up that is
owned by another user (root excepted) or writable by group/others, or a catalog such a file names, is refused
with one line naming the file and the fix (`chipswap --config FILE`, or the folder in `safe_directories` of
the user config); `config show` lists what it refused. A config path that exists but is no regular file (a
folder, FIFO, device, symlink loop) is named, never silently skipped.

A bad value is one ChipswapError line naming the file or variable, the key and an example (exit 2). May not:
write anything, or decide anything a command's flags do not already decide.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import typer

from chipswap.errors import ChipswapError
from chipswap.ranges import UNITS, Spec, problem
from chipswap.textsafe import one_line

PROJECT_FILE = "chipswap.toml"
MAX_CONFIG_BYTES = 64 * 1024
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def _region(v: Any) -> str:
    if not isinstance(v, str) or not _REGION.match(v.strip()):
        raise ValueError("an AWS region, e.g. us-east-1")
    return v.strip()


def _day_rate(v: Any) -> Decimal:
    try:
        d = Decimal(str(v).strip())
    except (InvalidOperation, ValueError):
        raise ValueError("a number of USD per engineer-day, e.g. 800") from None
    if not d.is_finite() or d <= 0 or problem(d, Spec("usd_per_day")) is not None:
        r = UNITS["usd_per_day"]
        raise ValueError(f"a number of USD per engineer-day above 0, from {r.lo} to {r.hi:,}, e.g. 800")
    return d


def _candidates(v: Any) -> tuple[str, ...]:
    items = [x.strip() for x in v.split(",")] if isinstance(v, str) else v
    if not isinstance(items, list | tuple) or not items or len(items) > 64:
        raise ValueError('a list of 1 to 64 instance types, e.g. ["inf2.48xlarge", "trn1.32xlarge"]')
    if not all(isinstance(x, str) and _NAME.match(x) for x in items):
        raise ValueError('instance type names, e.g. ["inf2.48xlarge", "trn1.32xlarge"]')
    return tuple(items)


def _stack(side: str) -> Callable[[Any], str]:
    def parse(v: Any) -> str:
        from chipswap.projection.stacks import stack_ids

        ids = stack_ids(side)
        if v not in ids:
            raise ValueError(f"a {side} serving stack: {', '.join(ids)}")
        return str(v)

    return parse


def _catalog(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError("a catalog TOML file, e.g. chipswap-catalog.toml (from `chipswap catalog refresh`)")
    return v.strip()


@dataclass(frozen=True)
class Key:
    env: str
    parse: Callable[[Any], Any]
    builtin: Any
    help: str


KEYS: dict[str, Key] = {
    "region": Key("CHIPSWAP_REGION", _region, "us-east-1", "AWS region prices and capacity are read for"),
    "catalog": Key("CHIPSWAP_CATALOG", _catalog, None, "catalog file that overrides the shipped prices"),
    "day_rate": Key("CHIPSWAP_DAY_RATE", _day_rate, Decimal(800), "engineer day rate in USD (porting cost)"),
    "candidates": Key("CHIPSWAP_CANDIDATES", _candidates, None, "Neuron instance types a workload compares"),
    "stacks.gpu": Key("CHIPSWAP_GPU_STACK", _stack("gpu"), "vllm", "serving stack of the GPU fleet"),
    "stacks.neuron": Key("CHIPSWAP_NEURON_STACK", _stack("neuron"), "nxdi-vllm", "serving stack on Neuron"),
}


@dataclass(frozen=True)
class Setting:
    value: Any
    origin: str  # "flag --region", "env CHIPSWAP_REGION", "project /x/chipswap.toml", "user ...", "built-in"

    @property
    def builtin(self) -> bool:
        return self.origin == "built-in"


# `chipswap --config FILE` (or "none"): the project file named on the command line, set by cli/main
EXPLICIT_CONFIG: ContextVar[str | None] = ContextVar("chipswap_explicit_config", default=None)
SAFE_KEY = "safe_directories"  # user config only: folders whose project files are trusted whoever owns them


def user_file(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "chipswap" / "config.toml"


def _usable(path: Path, what: str) -> bool:
    """True for a regular file (through links), False when nothing is there; anything else that is there (a
    folder, FIFO, device, dangling link, symlink loop) is one error line naming it."""
    if not os.path.lexists(path):
        return False
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise ChipswapError(
            f"{what} {path} cannot be read ({exc.strerror or exc}); remove or fix it"
        ) from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise ChipswapError(f"{what} {path} is {kind}; make it a TOML file or remove it")
    return True


def untrusted(path: Path) -> str | None:
    """Why a file (and the link that names it) is not trusted as a project file, or None: owned by another
    user than this one or root, or writable by group or others (what anyone could have planted)."""
    if not hasattr(os, "geteuid"):
        return None
    me = os.geteuid()
    for st in (os.lstat(path), os.stat(path)):
        if st.st_uid not in (me, 0):
            return f"owned by uid {st.st_uid}, not by you (uid {me})"
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            who = "others" if st.st_mode & stat.S_IWOTH else "its group"
            return f"writable by {who} (mode {st.st_mode & 0o777:o})"
    return None


def _safe(path: Path, safe: tuple[str, ...]) -> bool:
    real = path.resolve()
    return any(d == "*" or real.is_relative_to(Path(d).expanduser().resolve()) for d in safe)


def refusal(path: Path, why: str, what: str = "project config") -> str:
    return (
        f"{what} {path} is {why}, so it is not applied; pass `chipswap --config {path}` if you trust it, or "
        f"add its folder to {SAFE_KEY} in {user_file()}"
    )


def project_file(cwd: Path | None = None, env: Mapping[str, str] | None = None) -> Path | None:
    """The nearest chipswap.toml from `cwd` up, stopping at a repository root (a .git entry) or home;
    `chipswap --config FILE` or $CHIPSWAP_PROJECT_CONFIG names the file instead ("none": no project file, as
    the test suite sets)."""
    env = os.environ if env is None else env
    named = (EXPLICIT_CONFIG.get() or env.get("CHIPSWAP_PROJECT_CONFIG", "")).strip()
    if named:
        if named.lower() == "none":
            return None
        where = "--config" if EXPLICIT_CONFIG.get() else "CHIPSWAP_PROJECT_CONFIG"
        if not _usable(Path(named), f"{where}:"):
            raise ChipswapError(f"{where}: file not found: {one_line(named, 200)}; fix it or unset it")
        return Path(named)
    home = Path(env.get("HOME") or Path.home()).resolve()
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if _usable(folder / PROJECT_FILE, "project config"):
            return folder / PROJECT_FILE
        if folder == home or (folder / ".git").exists():
            return None
    return None


def _explicit() -> bool:
    return bool((EXPLICIT_CONFIG.get() or os.environ.get("CHIPSWAP_PROJECT_CONFIG", "")).strip())


def _flatten(data: Mapping[str, Any], path: Path, *, user: bool = False) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in data.items():
        if k == "stacks" and isinstance(v, dict):
            flat.update({f"stacks.{s}": x for s, x in v.items()})
        elif not (user and k == SAFE_KEY):
            flat[k] = v
    unknown = [k for k in flat if k not in KEYS]
    if unknown:
        where = "" if user else f" ({SAFE_KEY} goes in the user config {user_file()})"
        raise ChipswapError(
            f"{path}: unknown key {one_line(unknown[0], 60)!r}; known keys: {', '.join(KEYS)}"
            f" (stacks.gpu / stacks.neuron go in a [stacks] table){where if unknown[0] == SAFE_KEY else ''}"
        )
    return flat


def _read_toml(path: Path) -> dict[str, Any]:
    from chipswap.datafile import read_toml

    return read_toml(path, "chipswap config file", max_bytes=MAX_CONFIG_BYTES)


def _read(path: Path, *, user: bool = False) -> dict[str, Any]:
    return _flatten(_read_toml(path), path, user=user)


def _safe_directories(data: Mapping[str, Any], path: Path) -> tuple[str, ...]:
    v = data.get(SAFE_KEY, [])
    ok = isinstance(v, list) and len(v) <= 256
    if not ok or not all(isinstance(x, str) and 0 < len(x) < 4096 for x in v):
        raise ChipswapError(
            f"{path}: {SAFE_KEY} = {one_line(repr(v), 80)} is not a list of folders; "
            'write e.g. safe_directories = ["/srv/shared/project"] (or ["*"] to trust every folder)'
        )
    return tuple(v)


def _parsed(key: str, raw: Any, where: str, base: Path | None, trust: tuple[str, ...] | None = None) -> Any:
    """`trust`: for a value read from a config file, its safe_directories (a catalog it names must pass the
    same ownership check as a project file unless it lies in one of them); None for env values."""
    try:
        value = KEYS[key].parse(raw)
    except ValueError as exc:
        raise ChipswapError(
            f"{where}: {key} = {one_line(repr(raw), 80)} is not {exc}; fix or remove it"
        ) from None
    if key == "catalog":
        p = Path(value).expanduser()
        p = p if p.is_absolute() or base is None else base / p  # relative to the file that names it
        if not _usable(p, f"{where}: catalog file"):
            raise ChipswapError(f"{where}: catalog file not found: {p}; fix the path or remove the key")
        why = untrusted(p) if trust is not None and not _safe(p, trust) else None
        if why:
            raise _Refused(p, why, "catalog named by " + where)
        value = str(p)
    return value


class _Refused(ChipswapError):
    def __init__(self, path: Path, why: str, what: str = "project config") -> None:
        super().__init__(refusal(path, why, what))
        self.path, self.why = path, why


def settings(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    refused: list[str] | None = None,
) -> dict[str, Setting]:
    """Every key's effective value and where it came from. `flags`: key -> the value a command's flag was
    given (None = not given), with the flag's name in `flags["<key>:flag"]` for the origin. An untrusted
    project file (or catalog) raises its refusal line, or, when `refused` is a list, is listed there and
    left out."""
    env = os.environ if env is None else env
    flags = flags or {}
    layers: list[tuple[str, Mapping[str, Any], Path | None]] = []
    user = user_file(env)
    safe: tuple[str, ...] = ()
    if _usable(user, "user config"):
        data = _read_toml(user)
        safe = _safe_directories(data, user)
        layers.append((f"user {user}", _flatten(data, user, user=True), user.parent))
    project = project_file(cwd, env)
    if project is not None:
        why = None if _explicit() or _safe(project, safe) else untrusted(project)
        if why is None:
            layers.append((f"project {project}", _read(project), project.parent))
        elif refused is None:
            raise _Refused(project, why)
        else:
            refused.append(f"{project} ({why})")
    envs = {k: env[key.env] for k, key in KEYS.items() if env.get(key.env, "").strip()}
    layers.append(("env", envs, Path.cwd()))
    out = {k: Setting(key.builtin, "built-in") for k, key in KEYS.items()}
    for origin, values, base in layers:
        for k, raw in values.items():
            where = f"env {KEYS[k].env}" if origin == "env" else origin
            trust = None if origin == "env" or (origin.startswith("project") and _explicit()) else safe
            try:
                out[k] = Setting(_parsed(k, raw, where, base, trust), where)
            except _Refused as exc:
                if refused is None:
                    raise
                refused.append(f"{exc.path} ({exc.why})")
    for k, v in flags.items():
        if k in KEYS and v is not None:
            out[k] = Setting(v, f"flag {flags.get(f'{k}:flag', k)}")
    return out


def resolve(**given: tuple[Any, str]) -> dict[str, Setting]:
    """What a command's flags leave open, filled in: `resolve(region=(region, "--region"))` -> every key's
    Setting, the flag's value when given (not None), else env > project > user > built-in. Keys: region,
    catalog, day_rate (the stacks and candidates reach `plan` through workload_defaults)."""
    flags: dict[str, Any] = {}
    for key, (value, flag) in given.items():
        flags[key], flags[f"{key}:flag"] = value, flag
    return settings(flags)


def origin_words(s: Setting) -> str:
    """ " (default)" for a built-in value, " (from env CHIPSWAP_DAY_RATE)" for a configured one, "" for a
    flag: the words an assumption line carries after the value."""
    if s.builtin:
        return " (default)"
    return "" if s.origin.startswith("flag") else f" (from {s.origin})"


def workload_defaults(found: Mapping[str, Setting]) -> dict[str, dict[str, Any]]:
    """The configured (not built-in) values as workload TOML defaults: they fill only what a workload leaves
    out (a workload's own value wins: it is this job's explicit input)."""
    where = {
        "region": ("fleet", "region"),
        "day_rate": ("porting", "day_rate_usd"),
        "candidates": ("targets", "candidates"),
        "stacks.gpu": ("fleet", "gpu_stack"),
        "stacks.neuron": ("targets", "stack"),
    }
    out: dict[str, dict[str, Any]] = {}
    for key, (table, field) in where.items():
        s = found[key]
        if not s.builtin:
            value = list(s.value) if isinstance(s.value, tuple) else s.value
            out.setdefault(table, {})[field] = value
    return out


def _show(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of lines.")) -> None:
    """The effective defaults and where each came from (flag > env > project > user > built-in), and the
    project files or catalogs refused as untrusted (owned by another user or writable by others)."""
    refused: list[str] = []
    found = settings(refused=refused)
    files = {"user": str(user_file()), "project": str(project_file() or "")}
    if as_json:
        doc = {
            "files": files,
            "refused": refused,
            "settings": {
                k: {"value": _jsonable(s.value), "origin": s.origin, "env": KEYS[k].env}
                for k, s in found.items()
            },
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    for k, s in found.items():
        shown = "-" if s.value is None else _text(s.value)
        typer.echo(one_line(f"{k} = {shown}  ({s.origin}; {KEYS[k].env})", 2000))
    typer.echo(f"user file: {files['user']}; project file: {files['project'] or 'none found'}")
    for r in refused:
        typer.echo(one_line(f"refused (not applied): {r}; trust it with `chipswap --config FILE` or "
                            f"{SAFE_KEY} in the user file", 2000))


def _jsonable(v: Any) -> Any:
    if isinstance(v, Decimal):
        return float(v)
    return list(v) if isinstance(v, tuple) else v


def _text(v: Any) -> str:
    return ", ".join(v) if isinstance(v, tuple) else str(v)


config_app = typer.Typer(help="Defaults from config files and CHIPSWAP_* variables.", no_args_is_help=True)
config_app.command("show")(_show)


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
