"""The plan's readiness memo: a plan re-run on the same model (another SLO, price or traffic) reads the
readiness result it computed before instead of importing torch and transformers and exporting the model
again (about 10 s of CPU, a third of `chipswap plan`; issue 38).

The key is the SHA-256 of everything the result depends on: the model's config as resolved (preset or
config.json; never a factory or an exported program, whose code can change behind the same name), the task,
the input shapes, the rules targets, full/representative, training, the installed torch and transformers
versions, and the bytes of chipswap's readiness and models packages, of the Neuron rule tables
(data/neuron_rules) and of this stage, so an upgrade or an edit re-checks. An entry is JSON, tagged
with an HMAC-SHA256 under the user's cache key (chipswap.compile.signing: the same key, kept outside the
memo folder): an entry nobody signed with that key, a malformed one, or one over MAX_ENTRY_BYTES is ignored
and the check runs again. Names on disk are the hex key only; nothing read from an entry becomes a path or
code.

Where: ``$CHIPSWAP_READINESS_MEMO`` (a folder, or ``off``), default the user's cache folder
``chipswap/readiness``. At most MAX_ENTRIES entries; writing is best effort (an unwritable folder means the
check runs each time). May not touch anything but that folder and the cache key.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

ENV_VAR = "CHIPSWAP_READINESS_MEMO"
MAX_ENTRIES = 512
MAX_ENTRY_BYTES = 4 << 20
SCHEMA = "chipswap.readiness-memo/1"
# the checking code, its rule tables, and this stage's code
_PACKAGES = ("readiness", "models", "data/neuron_rules", "plan/readiness.py", "plan/readiness_memo.py")
_SALT: list[str] = []


def _salt() -> str:
    """torch's and transformers' versions and the checking code's bytes (computed once per process)."""
    if not _SALT:
        from importlib.metadata import PackageNotFoundError, version

        h = hashlib.sha256(SCHEMA.encode())
        for dist in ("torch", "transformers"):
            try:
                h.update(f"{dist}={version(dist)}\n".encode())
            except PackageNotFoundError:
                h.update(f"{dist}=none\n".encode())
        root = Path(__file__).resolve().parent.parent
        for pkg in _PACKAGES:
            for f in sorted((root / pkg).rglob("*")) if (root / pkg).is_dir() else [root / pkg]:
                if f.is_file() and f.suffix in (".py", ".json", ".toml", ".yaml", ".csv"):
                    h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
        _SALT.append(h.hexdigest())
    return _SALT[0]


def memo_key(ref: Any, **inputs: Any) -> str | None:
    """The key of a readiness check of `ref` with these inputs; None when it must not be memoised (a factory
    or exported model, a config that cannot be hashed canonically, or the memo is off)."""
    if _folder() is None or getattr(ref, "kind", None) not in ("preset", "hf-config"):
        return None
    try:
        text = json.dumps(
            {"kind": ref.kind, "name": ref.name, "config": ref.config, "task": ref.task, **inputs},
            sort_keys=True,
            separators=(",", ":"),
            allow_nan=False,
        )
    except (TypeError, ValueError, RecursionError):
        return None
    return hashlib.sha256(f"{_salt()}\n{text}".encode()).hexdigest()


def _folder() -> Path | None:
    env = os.environ.get(ENV_VAR)
    if env:
        return None if env.strip().lower() == "off" else Path(env).expanduser()
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("chipswap")) / "readiness"
    except Exception:  # noqa: BLE001 - no cache folder: the check runs each time
        return None


def _key_bytes(create: bool) -> bytes | None:
    from chipswap.compile import signing
    from chipswap.errors import ChipswapError

    try:
        path = signing.default_key_path()
        if create:
            return signing.load_or_create_key(path)
        return signing.read_key(path) if path.exists() else None
    except (ChipswapError, OSError):
        return None


def recall(key: str | None) -> dict[str, Any] | None:
    """The result stored under `key` if there is a well-formed entry signed with the user's key, else None."""
    folder = _folder()
    if key is None or folder is None:
        return None
    path = folder / f"{key}.json"
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_ENTRY_BYTES:
            return None
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    secret = _key_bytes(create=False)
    if secret is None or not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("key") != key:
        return None
    from chipswap.compile.signing import tag_problem

    if tag_problem(secret, doc) is not None or not isinstance(doc.get("result"), dict):
        return None
    return doc["result"]


def remember(key: str | None, result: dict[str, Any]) -> None:
    """Store `result` (JSON-able) under `key`, signed (best effort)."""
    folder = _folder()
    if key is None or folder is None:
        return
    secret = _key_bytes(create=True)
    if secret is None:
        return
    from chipswap.atomic import atomic_write_bytes
    from chipswap.compile.signing import TAG_FIELD, tag

    doc: dict[str, Any] = {"schema": SCHEMA, "key": key, "result": result}
    try:
        doc[TAG_FIELD] = tag(secret, doc)
        data = json.dumps(doc, sort_keys=True, allow_nan=False).encode()
        if len(data) > MAX_ENTRY_BYTES:
            return
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if sum(1 for _ in zip(range(MAX_ENTRIES), folder.iterdir(), strict=False)) >= MAX_ENTRIES:
            return
        atomic_write_bytes(folder / f"{key}.json", data)
    except (OSError, ValueError, TypeError):
        return
    except Exception:  # noqa: BLE001 - ChipswapError from the atomic writer: the memo is best effort
        return
