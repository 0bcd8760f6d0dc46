"""Defaults a user keeps instead of repeating them: `~/.config/chipswap/config.toml` ($XDG_CONFIG_HOME
respected), a project `chipswap.toml` (the current folder or a parent, up to the repository root or the home
folder), and `CHIPSWAP_*` environment variables, for the keys in KEYS (region, catalog file, day rate,
candidates, serving stacks). Precedence: flag > environment > project > user > built-in; `settings()` is the
one function commands call, `chipswap config show` prints what it found and where each value came from.

A bad value is one ChipswapError line naming the file or variable, the key and an example (exit 2). May not:
write anything, or decide anything a command's flags do not already decide.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import typer

from chipswap.errors import ChipswapError
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
    if not d.is_finite() or d <= 0 or d > 1_000_000:
        raise ValueError("a number of USD per engineer-day above 0 and up to 1,000,000, e.g. 800")
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


def user_file(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "chipswap" / "config.toml"


def project_file(cwd: Path | None = None, env: Mapping[str, str] | None = None) -> Path | None:
    """The nearest chipswap.toml from `cwd` up, stopping at a repository root (a .git entry) or home;
    $CHIPSWAP_PROJECT_CONFIG names the file instead ("none": no project file, as the test suite sets)."""
    env = os.environ if env is None else env
    named = env.get("CHIPSWAP_PROJECT_CONFIG", "").strip()
    if named:
        if named.lower() == "none":
            return None
        if not Path(named).is_file():
            raise ChipswapError(
                f"CHIPSWAP_PROJECT_CONFIG: file not found: {one_line(named, 200)}; fix it or unset it"
            )
        return Path(named)
    home = Path(env.get("HOME") or Path.home()).resolve()
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / PROJECT_FILE).is_file():
            return folder / PROJECT_FILE
        if folder == home or (folder / ".git").exists():
            return None
    return None


def _flatten(data: Mapping[str, Any], path: Path) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in data.items():
        if k == "stacks" and isinstance(v, dict):
            flat.update({f"stacks.{s}": x for s, x in v.items()})
        else:
            flat[k] = v
    unknown = [k for k in flat if k not in KEYS]
    if unknown:
        raise ChipswapError(
            f"{path}: unknown key {one_line(unknown[0], 60)!r}; known keys: {', '.join(KEYS)}"
            " (stacks.gpu / stacks.neuron go in a [stacks] table)"
        )
    return flat


def _read(path: Path) -> dict[str, Any]:
    from chipswap.datafile import read_toml

    return _flatten(read_toml(path, "chipswap config file", max_bytes=MAX_CONFIG_BYTES), path)


def _parsed(key: str, raw: Any, where: str, base: Path | None) -> Any:
    try:
        value = KEYS[key].parse(raw)
    except ValueError as exc:
        raise ChipswapError(
            f"{where}: {key} = {one_line(repr(raw), 80)} is not {exc}; fix or remove it"
        ) from None
    if key == "catalog":
        p = Path(value).expanduser()
        p = p if p.is_absolute() or base is None else base / p  # relative to the file that names it
        if not p.is_file():
            raise ChipswapError(f"{where}: catalog file not found: {p}; fix the path or remove the key")
        value = str(p)
    return value


def settings(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> dict[str, Setting]:
    """Every key's effective value and where it came from. `flags`: key -> the value a command's flag was
    given (None = not given), with the flag's name in `flags["<key>:flag"]` for the origin."""
    env = os.environ if env is None else env
    flags = flags or {}
    layers: list[tuple[str, Mapping[str, Any], Path | None]] = []
    user = user_file(env)
    if user.is_file():
        layers.append((f"user {user}", _read(user), user.parent))
    project = project_file(cwd, env)
    if project is not None:
        layers.append((f"project {project}", _read(project), project.parent))
    envs = {k: env[key.env] for k, key in KEYS.items() if env.get(key.env, "").strip()}
    layers.append(("env", envs, Path.cwd()))
    out = {k: Setting(key.builtin, "built-in") for k, key in KEYS.items()}
    for origin, values, base in layers:
        for k, raw in values.items():
            where = f"env {KEYS[k].env}" if origin == "env" else origin
            out[k] = Setting(_parsed(k, raw, where, base), where)
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
    """The effective defaults and where each came from (flag > env > project > user > built-in)."""
    found = settings()
    files = {"user": str(user_file()), "project": str(project_file() or "")}
    if as_json:
        doc = {
            "files": files,
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
