"""Read the catalog: the shipped data/catalog/catalog.toml, optionally merged with a user override file.

This is the catalog's only I/O edge. It validates every entry strictly and names the file, line, entry
(instance) and field of the first problem: a price or size must be a plain finite number inside documented
bounds (NUMBER_BOUNDS), never a boolean, a string, NaN, inf or a value so large Decimal arithmetic overflows.
The override uses the same schema; its entries replace shipped ones with the same key (instance name, chip
name, or instance+region+term for a price) and add the rest. Set `replace = true` at the top of the override
to ignore the shipped data entirely. It also renders catalog TOML (`toml_value`, `price_groups_toml`) for the
generator script and `chipswap catalog refresh`. It writes nothing itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from chipswap.datafile import parse_toml, read_text
from chipswap.economics.capacity import is_region_name
from chipswap.economics.catalog import (
    KINDS,
    TERMS,
    Catalog,
    Chip,
    Instance,
    Rate,
    check_block_days,
    validate,
)
from chipswap.errors import ChipswapError
from chipswap.ranges import UNITS

SHIPPED = "catalog.toml"

# Inclusive bounds for every number a catalog holds: far wider than any real instance or chip, narrow enough
# that the cost engine's Decimal arithmetic can never overflow (1e300 $/h would) and no count sizes a huge
# allocation. Documented in docs/cost.md.
# Fields with a unit in chipswap.ranges take its range from there (the one table); the rest are listed here.
RANGE_UNITS = {"usd_per_hour": "usd_per_hour", "accelerator_memory_gib": "gib", "memory_gib": "gib",
               "memory_bandwidth_gb_s": "gbps", "interconnect_gb_s": "gbps", "tflops_dense": "tflops"}
NUMBER_BOUNDS: dict[str, tuple[Decimal, Decimal]] = {
    **{key: (UNITS[unit].lo, UNITS[unit].hi) for key, unit in RANGE_UNITS.items()},
    "network_gbps": (Decimal("0.001"), Decimal("1000000")),
    "local_nvme_gb": (Decimal("1"), Decimal("100000000")),
}
INT_BOUNDS: dict[str, tuple[int, int]] = {
    "accelerator_count": (1, 4096),
    "neuron_cores": (0, 1_000_000),
    "vcpus": (1, 1_000_000),
}


class _Doc:
    """One parsed file, with enough of its text to point at the line of the n-th table or row."""

    def __init__(self, label: str, text: str) -> None:
        self.label = label
        self.lines = text.splitlines()
        self._headers: dict[str, list[int]] = {}
        self._rows: dict[int, list[int]] = {}
        self.data = parse_toml(text, f"{label}:", fix="fix the syntax at that line", parse_float=Decimal)

    def table_line(self, header: str, index: int) -> int | None:
        """1-based line of the index-th [[header]] table (the positions are found once per header)."""
        if header not in self._headers:
            mark = f"[[{header}]]"
            lines = enumerate(self.lines, 1)
            self._headers[header] = [n for n, line in lines if line.strip().startswith(mark)]
        found = self._headers[header]
        return found[index] if 0 <= index < len(found) else None

    def row_line(self, index: int, row: int) -> int | None:
        """1-based line of row `row` of the index-th [[prices]] table (each table's rows are found once)."""
        if index not in self._rows:
            start = self.table_line("prices", index)
            rows: list[int] = []
            for no in range(start or len(self.lines), len(self.lines)):
                text = self.lines[no].strip()
                if text.startswith("[["):
                    break
                if text.startswith("[") or text.startswith("rows = [["):
                    rows.append(no + 1)
            self._rows[index] = rows
        found = self._rows[index]
        return found[row] if 0 <= row < len(found) else None

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


def _bounded(doc: _Doc, value: Any, key: str, where: str, line: int | None) -> Decimal:
    """A plain finite number inside NUMBER_BOUNDS[key], or one error line naming file, entry and field."""
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        raise ChipswapError(
            doc.where(
                line,
                f"{where}: field '{key}' must be a plain number, got {value!r}; "
                "write it without quotes (check the schema in docs/cost.md)",
            )
        )
    d = Decimal(value)
    lo, hi = NUMBER_BOUNDS[key]
    if not d.is_finite():
        raise ChipswapError(
            doc.where(
                line, f"{where}: field '{key}' must be a finite number, got {value}; write a plain number"
            )
        )
    if d < lo or d > hi:
        raise ChipswapError(
            doc.where(
                line,
                f"{where}: field '{key}' must be > 0 and <= {hi} (smallest accepted {lo}), got {value}; "
                "fix the number",
            )
        )
    return d


def _num(
    doc: _Doc,
    entry: dict,
    key: str,
    where: str,
    line: int | None,
    *,
    optional: bool = False,
) -> Decimal | None:
    if optional and key not in entry:
        return None
    if key not in entry:
        raise ChipswapError(doc.where(line, f"{where}: missing field '{key}'; add it (see docs/cost.md)"))
    return _bounded(doc, entry[key], key, where, line)


def _int(doc: _Doc, entry: dict, key: str, where: str, line: int | None) -> int:
    value = _need(doc, entry, key, int, where, line)
    lo, hi = INT_BOUNDS[key]
    if not lo <= value <= hi:
        raise ChipswapError(
            doc.where(
                line, f"{where}: field '{key}' must be between {lo} and {hi}, got {value}; fix the number"
            )
        )
    return int(value)


def _tables(doc: _Doc, key: str) -> list[dict]:
    """The entries of an array of tables ([[key]]), each checked to be a table."""
    raw = doc.data.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        raise ChipswapError(
            doc.where(
                doc.table_line(key, 0), f"'{key}' must be an array of tables ([[{key}]]); fix the header"
            )
        )
    return raw


def _regions(doc: _Doc, value: Any, where: str, line: int | None) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(r, str) and is_region_name(r) for r in value):
        raise ChipswapError(
            doc.where(
                line,
                f"{where}: field 'regions' must be a list of AWS region names like \"us-east-1\", "
                f"got {value!r}; fix the list",
            )
        )
    return tuple(value)


def _str(doc: _Doc, entry: dict, key: str, where: str, line: int | None, *, optional: bool = False) -> str:
    if optional and key not in entry:
        return ""
    value = _need(doc, entry, key, str, where, line)
    if not optional and not value.strip():
        raise ChipswapError(doc.where(line, f"{where}: field '{key}' is empty; fill it in"))
    return value


def _named_entries(doc: _Doc, table: str) -> Iterator[tuple[dict, str, int | None]]:
    """Each [[table]] entry with the words that place it in errors ("[[chip]] Trainium2") and its line."""
    for n, e in enumerate(_tables(doc, table)):
        name = e.get("name") if isinstance(e.get("name"), str) else f"#{n + 1}"
        yield e, f"[[{table}]] {name}", doc.table_line(table, n)


def _instances(doc: _Doc) -> list[Instance]:
    out = []
    for e, where, line in _named_entries(doc, "instance"):
        kind = _str(doc, e, "kind", where, line)
        if kind not in KINDS:
            raise ChipswapError(
                doc.where(line, f"{where}: field 'kind' is {kind!r}; use one of {', '.join(KINDS)}")
            )
        regions = _regions(doc, _need(doc, e, "regions", list, where, line), where, line)
        net = _num(doc, e, "network_gbps", where, line, optional=True)
        nvme = _num(doc, e, "local_nvme_gb", where, line, optional=True)
        out.append(
            Instance(
                name=_str(doc, e, "name", where, line),
                family=_str(doc, e, "family", where, line),
                kind=kind,
                accelerator=_str(doc, e, "accelerator", where, line),
                accelerator_count=_int(doc, e, "accelerator_count", where, line),
                accelerator_memory_gib=_num(doc, e, "accelerator_memory_gib", where, line),
                neuron_cores=_int(doc, e, "neuron_cores", where, line),
                vcpus=_int(doc, e, "vcpus", where, line),
                memory_gib=_num(doc, e, "memory_gib", where, line),
                regions=regions,
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
    for e, where, line in _named_entries(doc, "chip"):
        tflops = _need(doc, e, "tflops_dense", dict, where, line)
        pairs = []
        for dtype, value in tflops.items():
            pairs.append((dtype.lower(), _bounded(doc, value, "tflops_dense", f"{where} ({dtype})", line)))
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


def _names(e: dict) -> str:
    """'(instance, region, term)' of a price entry, as far as they are plain strings, for error lines."""
    parts = [e.get(k) for k in ("instance", "region", "term")]
    shown = [p for p in parts if isinstance(p, str) and p]
    return f" ({', '.join(shown)})" if shown else ""


def _rate(doc: _Doc, e: dict, where: str, line: int | None) -> Rate:
    where = where + _names(e)
    term = _str(doc, e, "term", where, line)
    if term not in TERMS:
        raise ChipswapError(
            doc.where(line, f"{where}: field 'term' is {term!r}; use one of {', '.join(TERMS)}")
        )
    region = _str(doc, e, "region", where, line)
    if not is_region_name(region):
        raise ChipswapError(
            doc.where(line, f"{where}: field 'region' is {region!r}, not an AWS region name like us-east-1")
        )
    usd = _num(doc, e, "usd_per_hour", where, line)
    assert usd is not None
    return Rate(
        block_days=_block_days(doc, e, term, where, line),
        usd_per_hour=usd,
        term=term,
        region=region,
        source=_str(doc, e, "source", where, line),
        as_of=_str(doc, e, "as_of", where, line),
        instance=_str(doc, e, "instance", where, line),
        note=_str(doc, e, "note", where, line, optional=True),
    )


def _block_days(doc: _Doc, e: dict, term: str, where: str, line: int | None) -> tuple[int, ...]:
    """A capacity-block price's optional `block_days` (lengths it is sold for), each a length AWS sells."""
    if "block_days" not in e:
        return ()
    value = e["block_days"]
    if term != "capacity-block":
        raise ChipswapError(
            doc.where(line, f"{where}: field 'block_days' is only for term capacity-block; remove it")
        )
    if not isinstance(value, list) or not value or not all(isinstance(d, int) for d in value):
        raise ChipswapError(
            doc.where(line, f"{where}: field 'block_days' must be a list of whole days, got {value!r}")
        )
    try:
        return tuple(check_block_days(d) for d in value)
    except ChipswapError as exc:
        raise ChipswapError(doc.where(line, f"{where}: {exc}")) from None


def _rates(doc: _Doc) -> list[Rate]:
    out = []
    # single prices: [[price]] instance/region/term/usd_per_hour/source/as_of[/note]
    for n, e in enumerate(_tables(doc, "price")):
        out.append(_rate(doc, e, f"[[price]] #{n + 1}", doc.table_line("price", n)))
    # grouped prices: [[prices]] term/source/as_of[/note]
    #   + rows = [[instance, region, usd_per_hour[, note]], ...]
    for n, group in enumerate(_tables(doc, "prices")):
        gline = doc.table_line("prices", n)
        gwhere = f"[[prices]] #{n + 1}"
        for key in ("term", "source", "as_of"):
            _str(doc, group, key, gwhere, gline)
        _str(doc, group, "note", gwhere, gline, optional=True)
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
            if "block_days" in group:
                entry["block_days"] = group["block_days"]
            if len(row) == 4 and not isinstance(row[3], str):
                raise ChipswapError(
                    doc.where(line, f"{where}: the 4th cell (a note) must be text, got {row[3]!r}")
                )
            notes = [x for x in (group.get("note"), row[3] if len(row) == 4 else None) if x]
            if notes:
                entry["note"] = "; ".join(notes)
            where = f"{gwhere} row {k + 1}"
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


def parse_catalog(text: str, label: str) -> Catalog:
    """A user catalog's text merged with (or replacing) the shipped catalog; `label` names it in errors."""
    base = _shipped()
    doc = _Doc(label, text)
    replace = doc.data.get("replace", False)
    if not isinstance(replace, bool):
        raise ChipswapError(doc.where(None, f"field 'replace' must be true or false, got {replace!r}"))
    instances, chips, rates, sources = _instances(doc), _chips(doc), _rates(doc), _sources(doc)
    if not (instances or chips or rates):
        raise ChipswapError(
            f"{label}: no [[instance]], [[chip]], [[price]] or [[prices]] entries; "
            "see docs/cost.md for the catalog schema"
        )
    if not replace:
        instances = _merge(list(base.instances), instances, lambda i: i.name.lower())
        chips = _merge(list(base.chips), chips, lambda c: c.name.lower())
        rates = _merge(list(base.rates), rates, lambda r: (r.instance.lower(), r.region, r.term))
        sources = {**dict(base.sources), **sources}
    cat = Catalog(tuple(instances), tuple(chips), tuple(rates), tuple(sources.items()), origin=label)
    _check(label, cat)
    return cat


def load_catalog(path: str | Path | None = None) -> Catalog:
    """The shipped catalog (cached), or the shipped one merged with / replaced by the user file at `path`."""
    if path is None:
        return _shipped()
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise ChipswapError(f"catalog file not found: {p}; pass an existing TOML file to --catalog")
    return parse_catalog(read_text(p, "catalog file"), str(p))


# ------------------------------------------------------------------------------------------- writing TOML


def toml_value(value: object) -> str:
    """One TOML value: Decimal keeps its exact digits (never a float round trip)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        text = format(value, "f")
        return text if "." in text else text + ".0"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(str(value), ensure_ascii=False)


def price_groups_toml(prices: Iterable[dict[str, Any]], group_notes: dict[str, str]) -> list[str]:
    """[[prices]] tables, one per (term, source, as_of); each price is a dict with instance, region, term,
    usd_per_hour, source, as_of and an optional note; `group_notes` gives a note per term."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for p in prices:
        groups.setdefault((p["term"], p["source"], p["as_of"]), []).append(p)
    out = []
    for (term, source, as_of), rows in groups.items():
        lines = [
            "[[prices]]",
            f"term = {toml_value(term)}",
            f"source = {toml_value(source)}",
            f"as_of = {toml_value(as_of)}",
        ]
        if term in group_notes:
            lines.append(f"note = {toml_value(group_notes[term])}")
        lines.append("rows = [  # instance, region, usd_per_hour[, note]")
        for p in rows:
            cells = [p["instance"], p["region"], p["usd_per_hour"]] + ([p["note"]] if p.get("note") else [])
            lines.append(f"  {toml_value(cells)},")
        lines.append("]")
        out.append("\n".join(lines) + "\n")
    return out
