"""Cache entries signed with a key kept outside the cache folder (issue 32): who can write the cache folder
cannot make chipswap load an entry it did not write, because an entry's tag is an HMAC-SHA256 under a key
only the user can read.

The key is 32 random bytes as hex in ``$CHIPSWAP_CACHE_KEY`` (a file path; tests set it) or
``<user config dir>/chipswap/cache.key`` (``$XDG_CONFIG_HOME/chipswap/cache.key``, ``~/.config/...``). It
is created on first use (``chipswap compile``) in an owner-only folder (0700) as an owner-only file (0600):
written to a temp file, fsynced, then hard-linked to its name, so parallel processes creating it at once
all end with the one key that won the link and nobody ever reads half a key. Reading refuses a key file that
is a symlink, not owned by the user, readable by group/others, in a folder others can write, or not 64 hex
digits.

``tag(key, doc)`` is pure: HMAC-SHA256 over a domain prefix and the canonical JSON of an entry's manifest
(every field but ``tag``; the manifest holds each file's size and sha256). May not: write anything but the
key file and its temp file, read the cache, or import torch.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

KEY_ENV = "CHIPSWAP_CACHE_KEY"
KEY_FILE = "cache.key"
TAG_FIELD = "tag"
_DOMAIN = b"chipswap.cache.tag/1\x00"
_KEY_BYTES = 32
_TAG_HEX = 64


class MissingKey(ChipswapError):
    """There is no cache key to check entries with (it is never created by a read)."""


class UnsignedEntry(ChipswapError):
    """A cache entry whose manifest no valid tag vouches for: refused, not loaded and not rebuilt over."""


def default_key_path() -> Path:
    env = os.environ.get(KEY_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("chipswap")) / KEY_FILE


def _unsafe(why: str, path: Path) -> ChipswapError:
    return ChipswapError(
        f"cache key {one_line(str(path), 160)} {why}; the key must be a file only you can read, in a folder"
        f" only you can write: fix its owner and permissions (chmod 600 the file, chmod 700 the folder) or"
        f" set {KEY_ENV} to another path"
    )


def _check_folder(folder: Path, key_path: Path) -> None:
    try:
        st = os.stat(folder)
    except OSError as exc:
        raise _unsafe(f"is in a folder that cannot be read ({exc.strerror or exc})", key_path) from None
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _unsafe("is in a folder another user owns or can write", key_path)


def read_key(path: Path | None = None) -> bytes:
    """The cache key's 32 bytes; MissingKey (one line) when there is none; never creates one."""
    path = path if path is not None else default_key_path()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise MissingKey(
            f"no cache key at {one_line(str(path), 160)}, so no cache entry can be checked (the cache was"
            f" written by another user or machine, or the key was removed); recompile with chipswap compile"
            f" (it creates a new key), or set {KEY_ENV} to the key file that signed this cache"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _unsafe("is a symbolic link", path) from None
        raise _unsafe(f"cannot be read ({exc.strerror or exc})", path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _unsafe("is not a regular file", path)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise _unsafe("is owned by another user or readable by others", path)
        data = os.read(fd, 4 * _KEY_BYTES)
    finally:
        os.close(fd)
    _check_folder(path.parent, path)
    text = data.decode("ascii", errors="replace").strip()
    if len(text) != 2 * _KEY_BYTES or any(c not in "0123456789abcdef" for c in text):
        raise ChipswapError(
            f"cache key {one_line(str(path), 160)} is not 64 hex digits; remove it (chipswap compile makes a"
            f" new one; every entry it signed must then be recompiled) or set {KEY_ENV} to the right key file"
        )
    return bytes.fromhex(text)


def load_or_create_key(path: Path | None = None) -> bytes:
    """The cache key, created (0600, in a 0700 folder) when there is none. Safe between processes: the first
    hard link wins and every process returns that key."""
    path = path if path is not None else default_key_path()
    try:
        return read_key(path)
    except MissingKey:
        pass
    folder = path.parent
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise _unsafe(f"cannot be created ({exc.strerror or exc})", path) from None
    _check_folder(folder, path)
    tmp = folder / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, (secrets.token_bytes(_KEY_BYTES).hex() + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # atomic: fails with EEXIST when another process created the key first
        except FileExistsError:
            pass
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        raise _unsafe(f"cannot be created ({exc.strerror or exc})", path) from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return read_key(path)


def cache_key(key_path: Path, cache_root: Path, *, create: bool = False) -> bytes:
    """The key for the cache at ``cache_root``; refused when it lies inside that cache (whoever writes the
    cache could replace it)."""
    if key_path.resolve().is_relative_to(cache_root.resolve()):
        raise ChipswapError(
            f"cache key {one_line(str(key_path), 160)} is inside the cache folder"
            f" {one_line(str(cache_root), 160)}, where whoever writes the cache could replace it;"
            f" set {KEY_ENV} to a path outside the cache"
        )
    return load_or_create_key(key_path) if create else read_key(key_path)


def refusal(entry_key: str, cache_root: str, why: str) -> str:
    """The one line that refuses an entry no valid tag vouches for, with the fix."""
    root = one_line(cache_root, 160)
    return (
        f"cache entry {entry_key} in {root} is refused: {why}; remove it with chipswap cache rm {entry_key}"
        f" --cache-dir {root} and recompile"
    )


# ------------------------------------------------------------------------------------------------ pure tags
def _message(doc: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in doc.items() if k != TAG_FIELD}
    return _DOMAIN + json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def tag(key: bytes, doc: Mapping[str, Any]) -> str:
    """HMAC-SHA256 (hex) of an entry manifest ``doc`` (as read back from JSON) without its ``tag`` field."""
    return hmac.new(key, _message(doc), hashlib.sha256).hexdigest()


def tag_problem(key: bytes, doc: Mapping[str, Any]) -> str | None:
    """Why ``doc``'s tag does not vouch for it (None when it does)."""
    got = doc.get(TAG_FIELD)
    if got is None:
        return "no signature (written before entries were signed, or not by chipswap)"
    if not isinstance(got, str) or len(got) != _TAG_HEX:
        return "signature is not an HMAC-SHA256 tag"
    try:
        want = tag(key, doc)
    except (ValueError, TypeError, RecursionError):  # nested too deep to re-encode: nothing chipswap wrote
        return "manifest cannot be re-encoded to check its signature"
    if not hmac.compare_digest(got, want):
        return "signature does not match (the manifest was changed, or another key signed it)"
    return None
