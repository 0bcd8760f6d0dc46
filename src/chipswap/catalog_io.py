"""Read the catalog: the shipped data/catalog/catalog.toml, optionally merged with a user override file.

This is the catalog's only I/O edge. It validates every entry and names the file, line and field of the first
problem. The override uses the same schema; its entries replace shipped ones with the same key (instance name,
chip name, or instance+region+term for a price) and add the rest. Set `replace = true` at the top of the
override to ignore the shipped data entirely.
"""

from __future__ import annotations

import tomllib
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from chipswap.core.catalog import KINDS, TERMS, Catalog, Chip, Instance, Rate, validate
from chipswap.errors import ChipswapError

SHIPPED = "catalog.toml"


class _Doc:
    """One parsed file, with enough of its text to point at the line of the n-th table or row."""

    def __init__(self, label: str, text: str) -> None:
        self.label = label
        self.lines = text.splitlines()
        try:
            self.data = tomllib.loads(text, parse_float=Decimal)
        except tomllib.TOMLDecodeError as exc:
            raise ChipswapError(f"{label}: not valid TOML: {exc}; fix the syntax at that line") from None

    def table_line(self, header: str, index: int) -> int | None:
        seen = -1
        for no, line in enumerate(self.lines, 1):
            if line.strip().startswith(f"[[{header}]]"):
                seen += 1
                if seen == index:
                    return no
        return None

    def row_line(self, index: int, row: int) -> int | None:
        start = self.table_line("prices", index)
        if start is None:
            return None
        seen = -1
        for no in range(start, len(self.lines)):
            text = self.lines[no].strip()
            if text.startswith("[["):
                return None
            if text.startswith("[") or text.startswith("rows = [["):
                seen += 1
                if seen == row:
                    return no + 1
        return None

    def where(self, line: int | None, what: str) -> str:
        return f"{self.label}:{line}: {what}" if line else f"{self.label}: {what}"


def _need(doc: _Doc, entry: dict, key: str, kind: type | tuple, where: str, line: int | None) -> Any:
    if key not in entry:
        raise ChipswapError(doc.where(line, f"{where}: missing field '{key}'; add it (see docs/cost.md)"))
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ChipswapError(
            doc.where(
                line,
                f"{where}: field '{key}' has the wrong type ({value!r}); check the schema in docs/cost.md",
            )
        )
    return value


def _num(
    doc: _Doc,
    entry: dict,
    key: str,
    where: str,
    line: int | None,
    *,
    optional: bool = False,
    positive: bool = True,
) -> Decimal | None:
    if optional and key not in entry:
        return None
    value = _need(doc, entry, key, (int, Decimal), where, line)
    d = Decimal(value)
    if positive and d <= 0 or d < 0:
        raise ChipswapError(
            doc.where(
                line,
                f"{where}: field '{key}' must be {'> 0' if positive else '>= 0'}, "
                f"got {value}; fix the number",
            )
        )
    return d


def _str(doc: _Doc, entry: dict, key: str, where: str, line: int | None, *, optional: bool = False) -> str:
    if optional and key not in entry:
        return ""
    value = _need(doc, entry, key, str, where, line)
    if not optional and not value.strip():
        raise ChipswapError(doc.where(line, f"{where}: field '{key}' is empty; fill it in"))
    return value


def _instances(doc: _Doc) -> list[Instance]:
    out = []
    raw = doc.data.get("instance", [])
    if not isinstance(raw, list):
        raise ChipswapError(
            doc.where(None, "'instance' must be an array of tables ([[instance]]); fix the header")
        )
    for n, e in enumerate(raw):
        line = doc.table_line("instance", n)
        name = e.get("name") if isinstance(e.get("name"), str) else f"#{n + 1}"
        where = f"[[instance]] {name}"
        kind = _str(doc, e, "kind", where, line)
        if kind not in KINDS:
            raise ChipswapError(
                doc.where(line, f"{where}: field 'kind' is {kind!r}; use one of {', '.join(KINDS)}")
            )
        regions = _need(doc, e, "regions", list, where, line)
        if not all(isinstance(r, str) and r for r in regions):
            raise ChipswapError(doc.where(line, f"{where}: field 'regions' must be a list of region names"))
        net = _num(doc, e, "network_gbps", where, line, optional=True)
        nvme = _num(doc, e, "local_nvme_gb", where, line, optional=True)
        out.append(
            Instance(
                name=_str(doc, e, "name", where, line),
                family=_str(doc, e, "family", where, line),
                kind=kind,
                accelerator=_str(doc, e, "accelerator", where, line),
                accelerator_count=int(_need(doc, e, "accelerator_count", int, where, line)),
                accelerator_memory_gib=_num(doc, e, "accelerator_memory_gib", where, line),
                neuron_cores=int(_need(doc, e, "neuron_cores", int, where, line)),
                vcpus=int(_need(doc, e, "vcpus", int, where, line)),
                memory_gib=_num(doc, e, "memory_gib", where, line),
                regions=tuple(regions),
                network_gbps=net,
                local_nvme_gb=int(nvme) if nvme is not None else None,
                price_note=_str(doc, e, "price_note", where, line, optional=True),
                source=_str(doc, e, "source", where, line),
                as_of=_str(doc, e, "as_of", where, line),
            )
        )
    return out


def _chips(doc: _Doc) -> list[Chip]:
    out = []
    for n, e in enumerate(doc.data.get("chip", [])):
        line = doc.table_line("chip", n)
        name = e.get("name") if isinstance(e.get("name"), str) else f"#{n + 1}"
        where = f"[[chip]] {name}"
        tflops = _need(doc, e, "tflops_dense", dict, where, line)
        pairs = []
        for dtype, value in tflops.items():
            if isinstance(value, bool) or not isinstance(value, (int, Decimal)) or value <= 0:
                raise ChipswapError(doc.where(line, f"{where}: tflops_dense.{dtype} must be a number > 0"))
            pairs.append((dtype.lower(), Decimal(value)))
        out.append(
            Chip(
                name=_str(doc, e, "name", where, line),
                vendor=_str(doc, e, "vendor", where, line),
                kind=_str(doc, e, "kind", where, line),
                tflops_dense=tuple(pairs),
                memory_gib=_num(doc, e, "memory_gib", where, line),
                memory_bandwidth_gb_s=_num(doc, e, "memory_bandwidth_gb_s", where, line),
                source=_str(doc, e, "source", where, line),
                as_of=_str(doc, e, "as_of", where, line),
                compute_units=_str(doc, e, "compute_units", where, line, optional=True),
                memory_type=_str(doc, e, "memory_type", where, line, optional=True),
                interconnect=_str(doc, e, "interconnect", where, line, optional=True),
                interconnect_gb_s=_num(doc, e, "interconnect_gb_s", where, line, optional=True),
                confidence=_str(doc, e, "confidence", where, line, optional=True),
                sparse_note=_str(doc, e, "sparse_note", where, line, optional=True),
                notes=_str(doc, e, "notes", where, line, optional=True),
            )
        )
    return out


def _rate(doc: _Doc, e: dict, where: str, line: int | None) -> Rate:
    term = _str(doc, e, "term", where, line)
    if term not in TERMS:
        raise ChipswapError(
            doc.where(line, f"{where}: field 'term' is {term!r}; use one of {', '.join(TERMS)}")
        )
    return Rate(
        usd_per_hour=_num(doc, e, "usd_per_hour", where, line),
        term=term,
        region=_str(doc, e, "region", where, line),
        source=_str(doc, e, "source", where, line),
        as_of=_str(doc, e, "as_of", where, line),
        instance=_str(doc, e, "instance", where, line),
        note=_str(doc, e, "note", where, line, optional=True),
    )


def _rates(doc: _Doc) -> list[Rate]:
    out = []
    # single prices: [[price]] instance/region/term/usd_per_hour/source/as_of[/note]
    for n, e in enumerate(doc.data.get("price", [])):
        out.append(_rate(doc, e, f"[[price]] #{n + 1}", doc.table_line("price", n)))
    # grouped prices: [[prices]] term/source/as_of[/note]
    #   + rows = [[instance, region, usd_per_hour[, note]], ...]
    for n, group in enumerate(doc.data.get("prices", [])):
        gline = doc.table_line("prices", n)
        gwhere = f"[[prices]] #{n + 1}"
        for key in ("term", "source", "as_of"):
            _str(doc, group, key, gwhere, gline)
        rows = _need(doc, group, "rows", list, gwhere, gline)
        for k, row in enumerate(rows):
            line = doc.row_line(n, k) or gline
            where = f"{gwhere} ({group['term']}) row {k + 1}"
            if not isinstance(row, list) or len(row) not in (3, 4):
                raise ChipswapError(
                    doc.where(
                        line,
                        f"{where}: a row is [instance, region, usd_per_hour] or "
                        f"[instance, region, usd_per_hour, note], got {row!r}",
                    )
                )
            entry = {
                "instance": row[0],
                "region": row[1],
                "usd_per_hour": row[2],
                "term": group["term"],
                "source": group["source"],
                "as_of": group["as_of"],
            }
            notes = [x for x in (group.get("note"), row[3] if len(row) == 4 else None) if x]
            if notes:
                entry["note"] = "; ".join(str(x) for x in notes)
            out.append(_rate(doc, entry, where, line))
    return out


def _sources(doc: _Doc) -> dict[str, str]:
    src = doc.data.get("sources", {})
    if not isinstance(src, dict) or not all(isinstance(v, str) for v in src.values()):
        raise ChipswapError(
            doc.where(doc.table_line("sources", 0), "[sources] must map a key to a citation string")
        )
    return dict(src)


def _merge(base: list, extra: list, key) -> list:
    merged = {key(x): x for x in base}
    merged.update({key(x): x for x in extra})
    return list(merged.values())


def _check(doc_label: str, catalog: Catalog) -> None:
    problems = validate(catalog)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ChipswapError(f"{doc_label}: {problems[0]}{more}; fix the catalog file")


@lru_cache(maxsize=1)
def _shipped() -> Catalog:
    text = resources.files("chipswap.data").joinpath("catalog", SHIPPED).read_text(encoding="utf-8")
    doc = _Doc(f"<shipped {SHIPPED}>", text)
    cat = Catalog(
        tuple(_instances(doc)), tuple(_chips(doc)), tuple(_rates(doc)), tuple(_sources(doc).items())
    )
    _check(doc.label, cat)
    return cat


def load_catalog(path: str | Path | None = None) -> Catalog:
    """The shipped catalog (cached), or the shipped one merged with / replaced by the user file at `path`."""
    base = _shipped()
    if path is None:
        return base
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ChipswapError(f"catalog file not found: {p}; pass an existing TOML file to --catalog") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ChipswapError(f"cannot read catalog file {p}: {exc}; pass a readable UTF-8 TOML file") from None
    doc = _Doc(str(p), text)
    replace = doc.data.get("replace", False)
    if not isinstance(replace, bool):
        raise ChipswapError(doc.where(None, f"field 'replace' must be true or false, got {replace!r}"))
    instances, chips, rates, sources = _instances(doc), _chips(doc), _rates(doc), _sources(doc)
    if not (instances or chips or rates):
        raise ChipswapError(
            f"{p}: no [[instance]], [[chip]], [[price]] or [[prices]] entries; "
            "see docs/cost.md for the catalog schema"
        )
    if not replace:
        instances = _merge(list(base.instances), instances, lambda i: i.name.lower())
        chips = _merge(list(base.chips), chips, lambda c: c.name.lower())
        rates = _merge(list(base.rates), rates, lambda r: (r.instance.lower(), r.region, r.term))
        sources = {**dict(base.sources), **sources}
    cat = Catalog(tuple(instances), tuple(chips), tuple(rates), tuple(sources.items()), origin=str(p))
    _check(str(p), cat)
    return cat
