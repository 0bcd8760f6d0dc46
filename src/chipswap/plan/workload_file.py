"""Reading a workload file: TOML -> a validated Workload, every validation error as one line naming the file,
the key and the expected form (`load_workload`, `parse_workload`), and the documented schema `chipswap plan
--explain` / `chipswap workload-help` print (`schema_help`, from the field descriptions in
chipswap.plan.workload).

May not read anything but the workload file (through chipswap.datafile) and the catalog (for did-you-mean).
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationError

from chipswap.errors import ChipswapError, closest
from chipswap.plan.workload import Workload
from chipswap.ranges import UNITS, show

# --------------------------------------------------------------------------------------------------- loading


def _bound(v: Any) -> str:
    """A bound as the user would write it: 0, 0.5, 100000 (not Decimal('1E+10') or 0.0)."""
    if isinstance(v, str):  # pydantic hands Decimal bounds over as their repr
        v = re.sub(r"^Decimal\('(.*)'\)$", r"\1", v)
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return f"{f:.0f}" if f.is_integer() and abs(f) >= 1e5 else f"{f:g}"


def _expected_form(err: dict[str, Any]) -> str:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    forms = {
        "int_parsing": "an integer",
        "int_type": "an integer",
        "int_from_float": "a whole number",
        "float_parsing": "a number",
        "float_type": "a number",
        "decimal_parsing": "a number",
        "decimal_type": "a number",
        "bool_parsing": "true or false",
        "bool_type": "true or false",
        "string_type": "a string in quotes",
        "list_type": 'a list, e.g. ["a", "b"]',
        "dict_type": "a table",
        "model_type": "a table",
        "model_attributes_type": "a table",
        "greater_than": f"a number > {_bound(ctx.get('gt'))}",
        "greater_than_equal": f"a number >= {_bound(ctx.get('ge'))}",
        "less_than_equal": f"a number <= {_bound(ctx.get('le'))}",
        "less_than": f"a number < {_bound(ctx.get('lt'))}",
        "too_short": "a non-empty list",
        "finite_number": "a finite number",
        "literal_error": f"one of {ctx.get('expected', '')}",
    }
    if kind in forms:
        return forms[kind]
    msg = str(err.get("msg", "invalid value"))
    return msg.removeprefix("Value error, ")


def _key(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif "." in str(p) or " " in str(p):
            parts.append(f'."{p}"' if parts else f'"{p}"')
        else:
            parts.append(f".{p}" if parts else str(p))
    return "".join(parts) or "(top level)"


def _first_error(errors: list[Any]) -> Any:
    """The error to report: an unknown key first (a typo'd key also makes its real key look missing)."""
    for kind in ("extra_forbidden",):
        for err in errors:
            if err.get("type") == kind:
                return err
    return errors[0]


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the model accepts at the table holding `loc` (for did-you-mean on an unknown key)."""
    model: type[BaseModel] | None = Workload
    skip_next = False
    for part in loc[:-1]:
        if skip_next:  # the instance name under a table of tables
            skip_next = False
            continue
        if model is None:
            return []
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        model = _submodel(field.annotation)
        if get_origin(field.annotation) is dict:
            skip_next = True
    return list(model.model_fields) if model is not None else []


def format_validation_error(path: str | Path, exc: ValidationError) -> str:
    """One line: file, key, expected form (an unknown key first, else the first error; count of others)."""
    errors = exc.errors(include_url=False)
    err = _first_error(errors)
    raw_loc = tuple(p for p in err.get("loc", ()) if p not in ("function-after",))
    loc = raw_loc
    msg = _expected_form(err)
    key = _key(loc)
    m = re.match(r"^([A-Za-z_][\w.\"\-]*): (.*)$", msg)
    if m and err.get("type") == "value_error":
        sub_key = m.group(1)
        key = sub_key if key == "(top level)" or sub_key.startswith(f"{key}.") else f"{key}.{sub_key}"
        msg = m.group(2)
    got = err.get("input")
    shown = ""
    if (
        err.get("type") not in ("missing", "extra_forbidden")
        and not isinstance(got, dict)
        and got is not None
    ):
        shown = f" (got {got!r})"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    if err.get("type") == "missing":
        return f"{path}: {key}: missing; this key is required (see `chipswap workload-help`){more}"
    if err.get("type") == "extra_forbidden":
        near = closest(str(loc[-1]), _known_keys(loc), n=1) if loc else []
        fix = (
            f"did you mean {', '.join(near)}?"
            if near
            else "remove it or check its spelling (see `chipswap workload-help`)"
        )
        return f"{path}: unknown key {key}; {fix}{more}"
    if not msg.startswith("expected "):
        msg = f"expected {msg}"
    form, sep, fix = msg.partition("; ")  # the value goes beside the form, before the fix
    return f"{path}: {key}: {form}{shown}{sep}{fix}{more}"


def _catalog_problem(data: dict[str, Any], catalog: Any = None) -> str | None:
    """A region or instance name the catalog does not know, as 'key: problem; did you mean ...?'."""
    if catalog is None:
        try:
            from chipswap.economics.catalog_io import load_catalog

            catalog = load_catalog()
        except ChipswapError:
            return None
    regions = list(catalog.regions)
    names = [i.name for i in catalog.instances]

    def table(name: str) -> dict[str, Any]:
        t = data.get(name)
        return t if isinstance(t, dict) else {}

    def hint(value: str, choices: list[str], what: str, n: int = 3) -> str:
        near = closest(value, choices, n=n)
        return f"did you mean {', '.join(near)}?" if near else f"see `chipswap catalog --help` for the {what}"

    for sect in ("fleet", "targets"):
        region = table(sect).get("region")
        if isinstance(region, str) and region not in regions:
            return f"{sect}.region: unknown region {region!r}; {hint(region, regions, 'regions', 1)}"
    inst = table("fleet").get("instance")
    if isinstance(inst, str) and inst not in names:
        return f"fleet.instance: unknown instance type {inst!r}; {hint(inst, names, 'instance types')}"
    cands = table("targets").get("candidates")
    if isinstance(cands, list):
        for i, c in enumerate(cands):
            if isinstance(c, str) and c not in names:
                fix = hint(c, names, "instance types")
                return f"targets.candidates[{i}]: unknown instance type {c!r}; {fix}"
    return None


def parse_workload(data: dict[str, Any], path: str | Path = "<workload>", catalog: Any = None) -> Workload:
    """Validate a parsed workload against `catalog` (default: the shipped one); every problem is one
    terminal-safe line naming the file and the key."""
    from chipswap.textsafe import one_line

    try:
        wl = Workload.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if not any(e.get("type") == "extra_forbidden" for e in errors):
            problem = _catalog_problem(data, catalog)
            if problem:
                raise ChipswapError(one_line(f"{path}: {problem}", 1000)) from None
        raise ChipswapError(one_line(format_validation_error(path, exc), 1000)) from None
    problem = _catalog_problem(data, catalog)
    if problem:
        raise ChipswapError(one_line(f"{path}: {problem}", 1000))
    return wl


MAX_WORKLOAD_BYTES = 1024 * 1024  # a workload file is a few KB; a megabyte is not a workload


def load_workload(path: str | Path, catalog: Any = None, defaults: Any = None) -> Workload:
    """Read and validate a workload TOML file; any problem is one ChipswapError line naming file and key
    (missing, a folder, too big, not UTF-8, not TOML, nested too deep: chipswap.datafile). `defaults`
    ({table: {key: value}}, the user's config) fill only keys the file leaves out of a table it has (or
    [targets], created for its candidates)."""
    from chipswap.datafile import read_toml

    p = Path(path)
    if not p.exists():
        raise ChipswapError(f"workload file not found: {p}; pass a TOML file or use --example")
    data = read_toml(p, "workload file", max_bytes=MAX_WORKLOAD_BYTES)
    for table, values in (defaults or {}).items():
        if table == "targets" and "targets" not in data:
            data["targets"] = {}
        if isinstance(data.get(table), dict):
            for key, value in values.items():
                data[table].setdefault(key, value)
    return parse_workload(data, p, catalog)


# ------------------------------------------------------------------------------------------------------ help


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is Literal:
        return " | ".join(f'"{a}"' for a in get_args(annotation))
    if origin is Annotated:
        return _type_name(get_args(annotation)[0])
    if origin in (list,):
        return f"list of {_type_name(get_args(annotation)[0])}"
    if origin in (dict,):
        return f"table of {_type_name(get_args(annotation)[1])}"
    args = [a for a in get_args(annotation) if a is not type(None)]
    if args:
        return " | ".join(_type_name(a) for a in args)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    return {str: "string", int: "integer", float: "number", bool: "true/false", Decimal: "number"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def _submodel(annotation: Any) -> type[BaseModel] | None:
    candidates = [annotation, *get_args(annotation)]
    for a in candidates:
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
        for b in get_args(a):
            if isinstance(b, type) and issubclass(b, BaseModel):
                return b
    return None


def _within(field: Any) -> str:
    """', 1 to 120 months': the numbers a field takes, its own bounds inside its unit's range."""
    import annotated_types as at

    specs = [m.spec for m in _metadata(field) if type(m).__name__ == "InRange"]
    if not specs:
        return ""
    r = UNITS[specs[0].unit]
    lo, hi, over, zero = r.lo, r.hi, None, False
    for m in field.metadata:
        if isinstance(m, (at.Le, at.Lt)):
            hi = min(hi, Decimal(str(getattr(m, "le", None) or getattr(m, "lt", None))))
        elif isinstance(m, at.Ge):
            zero = specs[0].zero and m.ge == 0
            lo = max(lo, Decimal(str(m.ge)))
        elif isinstance(m, at.Gt) and Decimal(str(m.gt)) >= r.lo:
            over = Decimal(str(m.gt))
    start = f"{'0, or ' if zero else ''}{show(lo)} to"
    if over is not None:
        start = f"more than {show(over)}, up to"
    return f", {start} {show(hi)} {r.unit}".rstrip()


def schema_help(model: type[BaseModel] = Workload, prefix: str = "") -> str:
    """The documented schema, built from the field descriptions (the single source of the help text)."""
    lines: list[str] = []
    if not prefix:
        lines.append(f"Workload file (TOML). {Workload.__doc__}")
        lines.append("")
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        sub = _submodel(field.annotation)
        dict_of = get_origin(field.annotation) is dict
        if sub is not None:
            header = f'[{prefix}{name}."<instance>"]' if dict_of else f"[{key}]"
            lines.append(f"{header}  {field.description or ''}")
            if sub.__doc__ and not dict_of:
                lines.append(f"    {' '.join(sub.__doc__.split())}")
            child_prefix = f'{prefix}{name}."<instance>".' if dict_of else f"{key}."
            lines.append(schema_help(sub, child_prefix))
            continue
        default = ""
        if not field.is_required():
            d = field.get_default(call_default_factory=True)
            shown = f'"{d}"' if isinstance(d, str) else str(d).lower() if isinstance(d, bool) else str(d)
            default = f" (default {shown})" if d is not None else " (optional)"
        lines.append(f"  {key} = {_type_name(field.annotation)}{default}{_within(field)}")
        lines.append(f"      {field.description or ''}")
    return "\n".join(line for line in lines if line != "")


# ------------------------------------------------------------------------------------------- numeric fields
def numeric_fields(
    model: type[BaseModel] = Workload, prefix: tuple[str, ...] = ()
) -> dict[tuple[str, ...], Any]:
    """Every number a workload file may hold: key path (a table of tables as "<instance>") -> its
    chipswap.ranges.Spec (from the field's In(...) validator), or None for a number with no unit (a test
    fails on one). The fuzz suite and docs/security.md derive their field lists from this."""
    from chipswap.plan.workload import FIGURE_RANGES, InRange
    from chipswap.ranges import Spec

    out: dict[tuple[str, ...], Any] = {}
    for name, field in model.model_fields.items():
        key = (*prefix, name)
        sub = _submodel(field.annotation)
        if sub is not None:
            table_of = get_origin(field.annotation) is dict
            out.update(numeric_fields(sub, (*key, "<instance>") if table_of else key))
            continue
        if _type_name(field.annotation) not in ("number", "integer", "number | None", "integer | None"):
            continue
        found = [m for m in _metadata(field) if isinstance(m, InRange)]
        out[key] = found[0].spec if found else None
    if model.__name__ == "InstanceFigures":  # FigureIn.value: the figure's unit (checked after conversion)
        for name, unit in FIGURE_RANGES.items():
            out[(*prefix, name, "value")] = Spec(unit)
    return out


def _metadata(field: Any) -> list[Any]:
    """The validators of a field's Annotated type (inside an Optional too), unwrapped from pydantic."""
    found = []
    for a in (field.annotation, *get_args(field.annotation)):
        if get_origin(a) is Annotated:
            found += [getattr(m, "func", m) for m in get_args(a)[1:]]
    found += [getattr(m, "func", m) for m in field.metadata]
    return found
