"""Which config.json files transformers has already accepted: a memo keyed by the config's hash, so checking a
config (transformers' own config checks, then a build on the meta device: 8-16 s of CPU, almost all of it
importing transformers and the model's module) runs once per config, not once per command.

The key is the SHA-256 of the config as read (canonical JSON), the task it is built for, the installed
transformers version and the bytes of the chipswap modules that do the checking (spec.py, build.py,
inputs.py, resolve.py, this file), so an upgrade or an edit of the checks re-checks every config. Only a
config that passed is remembered: a rejected one is checked again each time and fails with the same error
line.

Where: this process (a set), and one empty marker file per accepted config under
``$CHIPSWAP_CHECKED_CONFIGS`` (default: the user's cache folder, ``chipswap/checked-configs``). A marker is
only ever tested for existence (nothing is read from it, so a planted file cannot inject anything; at worst it
skips a check that the projection's own size checks still follow). At most MAX_MARKERS markers; past that,
nothing more is written. Writing is best effort: an unwritable folder only means the check runs again.
May not touch anything but that folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

ENV_VAR = "CHIPSWAP_CHECKED_CONFIGS"
MAX_MARKERS = 4096
_CHECKS = ("spec.py", "build.py", "inputs.py", "resolve.py", "checked.py")
_SEEN: set[str] = set()
_SALT: list[str] = []


def _salt() -> str:
    """transformers' version and the checking code's bytes (computed once per process)."""
    if not _SALT:
        from importlib.metadata import PackageNotFoundError, version

        try:
            tv = version("transformers")
        except PackageNotFoundError:
            tv = "none"
        h = hashlib.sha256(tv.encode())
        here = Path(__file__).resolve().parent
        for name in _CHECKS:
            try:
                h.update((here / name).read_bytes())
            except OSError:
                h.update(name.encode())
        _SALT.append(h.hexdigest())
    return _SALT[0]


def config_key(cfg: dict[str, Any], task: str) -> str | None:
    """The memo key of a config checked for `task`; None when the config cannot be hashed canonically
    (then it is simply checked every time)."""
    try:
        text = json.dumps(cfg, sort_keys=True, separators=(",", ":"), allow_nan=True, default=repr)
    except (TypeError, ValueError, RecursionError):
        return None
    return hashlib.sha256(f"{_salt()}\n{task}\n{text}".encode()).hexdigest()


def _folder() -> Path | None:
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("chipswap")) / "checked-configs"
    except Exception:  # noqa: BLE001 - no cache folder: the check runs each time
        return None


def already_checked(key: str | None) -> bool:
    """Whether the config with this key passed the checks before (this process or an earlier one)."""
    if key is None:
        return False
    if key in _SEEN:
        return True
    folder = _folder()
    if folder is not None and (folder / key).is_file():
        _SEEN.add(key)
        return True
    return False


def remember(key: str | None) -> None:
    """Record that the config with this key passed (best effort on disk)."""
    if key is None:
        return
    _SEEN.add(key)
    folder = _folder()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if sum(1 for _ in zip(range(MAX_MARKERS), folder.iterdir(), strict=False)) >= MAX_MARKERS:
            return
        fd = os.open(folder / key, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
        os.close(fd)
    except OSError:
        return
