"""Helpers for tests of model resolution: an empty accepted-config memo and a count of the meta builds."""

from __future__ import annotations

from chipswap.models import checked, resolve


def count_builds(tmp_path, monkeypatch) -> list[str]:
    """An empty memo under tmp_path, and the name of every config resolve_model builds on meta to check it."""
    monkeypatch.setenv(checked.ENV_VAR, str(tmp_path / "memo"))
    monkeypatch.setattr(checked, "_SEEN", set())
    calls: list[str] = []
    real = resolve.build_model

    def counting(ref, **kw):
        calls.append(ref.name)
        return real(ref, **kw)

    monkeypatch.setattr(resolve, "build_model", counting)
    return calls
