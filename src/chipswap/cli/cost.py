"""`chipswap cost job` (job cost, saving, break-even run); `chipswap cost serve` ($/1M, fleet)."""

from __future__ import annotations

import json
from decimal import Decimal

import typer
from rich.table import Table

from chipswap import ranges
from chipswap.cli.catalog import check_region
from chipswap.cli.common import (
    CATALOG_FLAG,
    JSON_TABLE_FLAG,
    console,
    flag_count,
    flag_number,
    flag_reserved,
    flag_term,
    maybe_flag,
    money,
    optional_number,
    print_table,
    rate_text,
)
from chipswap.cli.config import Setting, origin_words, resolve
from chipswap.economics import cost as C
from chipswap.economics.catalog import (
    TERMS,
    Catalog,
    Rate,
    ReservedTerm,
    block_terms_text,
    term_words,
)
from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

cost_app = typer.Typer(
    help="Price a move: total cost to finish a job and its break-even run, or serving cost per 1M requests.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

TERM_HELP = f"Price term: {', '.join(TERMS)}."
RESERVED_HELP = "Your own reservation as UPFRONT,HOURLY,YEARS (USD, USD/h, 1 or 3), e.g. 10000,5.50,1."
MAX_HOURS_PER_MONTH = 744  # 31 days x 24 h
DEFAULT_PORTING_DAYS = "3"  # the seed's worked example; always printed as an assumption
DAY_RATE_HELP = (
    "Engineer day rate in USD for the porting cost (an assumption; default: day_rate from `chipswap config "
    "show`, else 800)."
)


def _defaults(region: str | None, day_rate: str | None, catalog_file: str | None) -> dict[str, Setting]:
    """The flags as given, the rest from `chipswap config show` (env, project, user, built-in)."""
    return resolve(
        region=(region, "--region"), day_rate=(day_rate, "--day-rate"), catalog=(catalog_file, "--catalog")
    )


DEFAULT_REGION = "us-east-1"


def _given_region(found: dict[str, Setting]) -> str | None:
    """The region a flag, variable or config file names; None for the built-in default, so that an instance
    sold only as Capacity Blocks is priced where a Capacity Block rate is known."""
    return None if found["region"].builtin else found["region"].value


REGION_HELP = (
    "AWS region for prices (default: region from `chipswap config show`, else us-east-1; an instance sold "
    "only as Capacity Blocks is priced where a Capacity Block rate is known)."
)
BLOCK_DAYS_HELP = (
    "Capacity Block length in days for a capacity-block candidate (1-14, then 21, 28, ... 182); default: the "
    "shortest block covering the hours."
)


def priced(catalog: Catalog, instance: str, region: str | None, term: str) -> Rate:
    """The price of `instance` at `term` in `region` (default us-east-1). An instance sold only as Capacity
    Blocks gets its Capacity Block rate: in `region` when given, else the cheapest region that has one."""
    where = region or DEFAULT_REGION
    found = catalog.purchase_rate(instance, where, term)
    if found is None and region is None and catalog.capacity_block_only(instance):
        blocks = [r for r in catalog.rates_for(instance) if r.is_capacity_block]
        found = min(blocks, key=lambda r: (r.usd_per_hour, r.region))
    return found if found is not None else catalog.rate(instance, where, term)


def block_lines(catalog: Catalog, r: Rate, region: str | None) -> list[str]:
    """Assumption lines for a Capacity Block rate: the purchase terms, the accelerator rate, where priced."""
    acc = catalog.accelerator_rate(r).quantize(Decimal("0.0001")).normalize()
    out = [
        f"{r.instance} is priced as an EC2 Capacity Block: {block_terms_text(r)}; "
        f"${acc:f} per accelerator-hour; a dated snapshot, not a live offering (`chipswap capacity "
        f"{r.instance}` looks up live offerings; --rate replaces it)"
    ]
    if region is None and r.region != DEFAULT_REGION:
        out.append(
            f"{r.instance} priced in {r.region}: the catalog has its Capacity Block rate there; pass --region"
        )
    return out


def _user_rate(instance: str, region: str, usd: Decimal, flag: str) -> Rate:
    return Rate(usd, "custom", region, f"user {flag}", "user input", instance, f"rate given with {flag}")


# --- output helpers (money and rate_text live in cli/common.py, shared with bench) --------------------------
def pct(d: Decimal) -> str:
    if abs(d) >= 10**6:  # an extreme ratio of two in-range costs (1e-6 $/h beside 1e5 $/h)
        return f"{float(d):,.4g} %"
    return f"{d.quantize(Decimal('0.1'), rounding='ROUND_HALF_UP')} %"


def _n(d: Decimal | None, places: str = "0.01") -> float | None:
    if d is None or abs(d) >= 10**15:  # beyond 1e15 the rounding is below a float's resolution anyway
        return None if d is None else float(d)
    return float(d.quantize(Decimal(places), rounding="ROUND_HALF_UP"))


def _payback(be: C.BreakEven | None) -> str:
    if be is None:
        return "-"
    return "never" if be.period is None else str(be.period)


def _as_of(r: Rate) -> str:
    return r.as_of if r.as_of in ("undated", "user input") else f"as of {r.as_of}"


def _rate_json(r: Rate) -> dict:
    return {
        "term": r.term,
        "region": r.region,
        "usd_per_hour": float(r.usd_per_hour),
        "source": r.source,
        "as_of": r.as_of,
        "note": r.note or None,
    }


# --- cost job -----------------------------------------------------------------------------------------------
@cost_app.command("job")
def cost_job(
    baseline: str = typer.Option(
        ..., "--baseline", metavar="INSTANCE", help="Instance the job runs on today, e.g. p5.48xlarge."
    ),
    baseline_hours: str = typer.Option(
        ..., "--baseline-hours", metavar="HOURS", help="Wall-clock hours the job takes there."
    ),
    candidate: str = typer.Option(
        ..., "--candidate", metavar="INSTANCE", help="Instance to move to, e.g. trn1.32xlarge."
    ),
    candidate_hours: str = typer.Option(
        ..., "--candidate-hours", metavar="HOURS", help="Wall-clock hours the job takes there."
    ),
    region_flag: str | None = maybe_flag("--region", metavar="REGION", help=REGION_HELP),
    baseline_count: str = typer.Option(
        "1", "--baseline-count", metavar="N", help="Baseline instances used by the job."
    ),
    candidate_count: str = typer.Option(
        "1", "--candidate-count", metavar="N", help="Candidate instances used by the job."
    ),
    baseline_term: str = typer.Option("on-demand", "--baseline-term", metavar="TERM", help=TERM_HELP),
    candidate_term: list[str] = typer.Option(
        [],
        "--candidate-term",
        metavar="TERM",
        help=TERM_HELP + " Repeat for several; default: every term with a price.",
    ),
    baseline_rate: str | None = maybe_flag(
        "--baseline-rate", metavar="USD_PER_H", help="Your own baseline $/h (overrides)."
    ),
    candidate_rate: str | None = maybe_flag(
        "--candidate-rate", metavar="USD_PER_H", help="Your own candidate $/h (adds a row)."
    ),
    reserved: str | None = maybe_flag(
        "--reserved", metavar="UPFRONT,HOURLY,YEARS", help=RESERVED_HELP + " Adds a candidate row."
    ),
    porting_days: str | None = maybe_flag(
        "--porting-days",
        metavar="DAYS",
        help="Engineer-days to port and validate on Neuron (an assumption; default 3).",
    ),
    day_rate: str | None = maybe_flag("--day-rate", metavar="USD", help=DAY_RATE_HELP),
    runs_per_month: str | None = maybe_flag(
        "--runs-per-month", metavar="N", help="Identical runs per month; adds the month the move pays back."
    ),
    block_days: str | None = maybe_flag("--block-days", metavar="DAYS", help=BLOCK_DAYS_HELP),
    as_json: bool = JSON_TABLE_FLAG,
    catalog_file: str | None = CATALOG_FLAG,
) -> None:
    """Total cost to finish one job on baseline vs candidate, the saving, and the run porting pays back."""
    b_hours = flag_number(baseline_hours, "--baseline-hours")
    c_hours = flag_number(candidate_hours, "--candidate-hours")
    baseline_count = flag_count(baseline_count, "--baseline-count")
    candidate_count = flag_count(candidate_count, "--candidate-count")
    days = flag_number(porting_days or DEFAULT_PORTING_DAYS, "--porting-days", allow_zero=True)
    found = _defaults(region_flag, day_rate, catalog_file)
    region_flag, catalog_file = _given_region(found), found["catalog"].value
    rate = flag_number(found["day_rate"].value, "--day-rate", allow_zero=True)
    rpm = optional_number(runs_per_month, "--runs-per-month")
    b_rate_user = optional_number(baseline_rate, "--baseline-rate", allow_zero=True)
    c_rate_user = optional_number(candidate_rate, "--candidate-rate", allow_zero=True)
    res = flag_reserved(reserved, "--reserved")
    b_term = flag_term(baseline_term, "--baseline-term")
    c_terms = [flag_term(t, "--candidate-term") for t in candidate_term]
    block = int(flag_count(block_days, "--block-days")) if block_days is not None else None

    catalog = load_catalog(catalog_file)
    check_region(catalog, region_flag)
    region = region_flag or DEFAULT_REGION
    b_inst = catalog.instance(baseline)
    c_inst = catalog.instance(candidate)
    b_rate = (
        _user_rate(b_inst.name, region, b_rate_user, "--baseline-rate")
        if b_rate_user is not None
        else priced(catalog, b_inst.name, region_flag, b_term)
    )
    c_rates = _candidate_rates(catalog, c_inst.name, region_flag, c_terms, c_rate_user, res)

    base = C.job_option(b_rate.term, b_inst.name, b_hours, b_rate.usd_per_hour, baseline_count)
    options, rows_rates, extra = [], [], []
    for r in c_rates:
        if not r.is_capacity_block:
            options.append(C.job_option(r.term, c_inst.name, c_hours, r.usd_per_hour, candidate_count))
            rows_rates.append(r)
            continue
        blk = C.block_job_cost(c_hours, r.usd_per_hour, candidate_count, r.lengths, block)
        per_hour = f"{term_words(r)}, per hour"
        options.append(C.job_option(per_hour, c_inst.name, c_hours, r.usd_per_hour, candidate_count))
        options.append(
            C.JobOption(
                f"{term_words(r)}, {blk.days}-day block",
                c_inst.name,
                Decimal(blk.billed_hours),
                candidate_count,
                r.usd_per_hour,
                blk.usd,
            )
        )
        rows_rates += [r, r]
        extra += block_lines(catalog, r, region_flag) + [
            f"the run as {blk.words}: {c_hours.normalize():f} h rounded up to whole days "
            f"({blk.billed_hours} h billed, paid up front); the per-hour row is the same hours at the "
            "same rate"
        ]
    c_rates = rows_rates
    result = C.compare_jobs(base, options, days, rate, rpm)
    assumptions = _job_assumptions(
        result, days, porting_days, rate, found["day_rate"], [b_rate, *c_rates], catalog
    )
    assumptions += extra

    if as_json:
        typer.echo(json.dumps(_job_json(result, region, b_rate, c_rates, assumptions), indent=2))
        return
    out = console()
    table = Table(title=f"Total cost to finish the job ({region}); porting pays back on run N")
    cols = ["", "instance", "term", "$/h", "hours", "job cost", "saving/run", "saving", "pays back (run)"]
    if rpm is not None:
        cols.append("pays back (month)")
    for col in cols:
        table.add_column(col, justify="left" if col in ("", "instance", "term") else "right")
    table.add_row(
        "baseline",
        f"{base.count} x {base.instance}",
        base.label,
        rate_text(base.usd_per_hour),
        f"{base.hours.normalize():f}",
        money(base.cost_usd),
        "-",
        "-",
        "-",
        *(["-"] if rpm is not None else []),
    )
    for line in result.lines:
        o = line.option
        row = [
            "candidate",
            f"{o.count} x {o.instance}",
            o.label,
            rate_text(o.usd_per_hour),
            f"{o.hours.normalize():f}",
            money(o.cost_usd),
            money(line.comparison.saving_usd),
            pct(line.comparison.saving_pct),
            _payback(line.per_run),
        ]
        if rpm is not None:
            row.append(_payback(line.per_month))
        table.add_row(*row)
    print_table(out, table)
    for a in assumptions:
        out.print(f"- {a}", markup=False, highlight=False)


def _candidate_rates(
    catalog: Catalog,
    name: str,
    region_flag: str | None,
    terms: list[str],
    user: Decimal | None,
    res: ReservedTerm | None,
) -> list[Rate]:
    region = region_flag or DEFAULT_REGION
    rates: list[Rate] = []
    if terms:
        rates = [priced(catalog, name, region_flag, t) for t in dict.fromkeys(terms)]
    elif user is None and res is None:
        have = {r.term: r for r in catalog.rates_for(name, region)}
        rates = [have[t] for t in TERMS if t in have]
        if not rates:
            rates = [priced(catalog, name, region_flag, "on-demand")]  # raises, naming priced regions
    if res is not None:
        rates.append(catalog.rate(name, region, res))
    if user is not None:
        rates.append(_user_rate(name, region, user, "--candidate-rate"))
    return rates


def _job_assumptions(
    result: C.JobComparison,
    days: Decimal,
    days_raw: str | None,
    rate: Decimal,
    rate_from: Setting,
    rates: list[Rate],
    catalog: Catalog,
) -> list[str]:
    default_days = days_raw is None
    out = [
        f"porting cost {money(result.porting_usd)} = {days.normalize():f} engineer-days"
        f"{' (default)' if default_days else ''} x ${rate.normalize():,f}/day"
        f"{origin_words(rate_from).replace('(default)', '(default day rate)')}"
        "; change with --porting-days / --day-rate",
        "saving = baseline job cost - candidate job cost; pays back on the first run whose cumulative saving "
        "covers the porting cost ('never' if it never does)",
    ]
    seen = set()
    for r in rates:
        key = (r.source, r.term)
        if key in seen:
            continue
        seen.add(key)
        text = f"{r.term} price: {one_line(r.source)} ({one_line(_as_of(r))})"
        if (
            r.note
            and r.term in ("1yr", "3yr", "ri-effective", "spot", "capacity-block")
            or r.term.startswith("reserved")
        ):
            text += f"; {r.note}"
        out.append(text)
    return out


def _job_json(
    result: C.JobComparison, region: str, b_rate: Rate, c_rates: list[Rate], assumptions: list[str]
) -> dict:
    b = result.baseline
    return {
        "region": region,
        "baseline": {
            "instance": b.instance,
            "count": b.count,
            "hours": float(b.hours),
            **_rate_json(b_rate),
            "cost_usd": _n(b.cost_usd),
        },
        "candidates": [
            {
                "instance": line.option.instance,
                "count": line.option.count,
                "hours": float(line.option.hours),
                **_rate_json(r),
                "cost_usd": _n(line.option.cost_usd),
                "saving_usd": _n(line.comparison.saving_usd),
                "saving_pct": _n(line.comparison.saving_pct, "0.1"),
                "pays_back_run": line.per_run.period,
                "pays_back_month": line.per_month.period if line.per_month else None,
            }
            for line, r in zip(result.lines, c_rates, strict=True)
        ],
        "porting": {
            "engineer_days": float(result.engineer_days),
            "day_rate_usd": float(result.day_rate_usd),
            "cost_usd": _n(result.porting_usd),
        },
        "runs_per_month": float(result.runs_per_month) if result.runs_per_month is not None else None,
        "assumptions": assumptions,
    }


# --- cost serve ---------------------------------------------------------------------------------------------
@cost_app.command("serve")
def cost_serve(
    instance: str = typer.Option(
        ..., "--instance", metavar="INSTANCE", help="Instance that serves, e.g. inf2.xlarge."
    ),
    throughput: str = typer.Option(
        ..., "--throughput", metavar="REQ_PER_S", help="Requests per second one instance sustains."
    ),
    region_flag: str | None = maybe_flag("--region", metavar="REGION", help=REGION_HELP),
    term: str = typer.Option("on-demand", "--term", metavar="TERM", help=TERM_HELP),
    rate_usd: str | None = maybe_flag(
        "--rate", metavar="USD_PER_H", help="Your own $/h for --instance (overrides --term)."
    ),
    reserved: str | None = maybe_flag("--reserved", metavar="UPFRONT,HOURLY,YEARS", help=RESERVED_HELP),
    utilization: str = typer.Option(
        "1.0", "--utilization", metavar="FRACTION", help="Average busy fraction, in (0, 1]."
    ),
    count: str = typer.Option("1", "--count", metavar="N", help="Fleet size (ignored when --rps is given)."),
    rps: str | None = maybe_flag(
        "--rps", metavar="REQ_PER_S", help="Average request rate; sizes each fleet to carry it."
    ),
    hours_per_month: str = typer.Option(
        "730", "--hours-per-month", metavar="HOURS", help="Hours billed per month, at most 744."
    ),
    baseline: str | None = maybe_flag(
        "--baseline", metavar="INSTANCE", help="Instance serving today, e.g. g5.xlarge."
    ),
    baseline_throughput: str | None = maybe_flag(
        "--baseline-throughput", metavar="REQ_PER_S", help="Its requests/s."
    ),
    baseline_term: str = typer.Option("on-demand", "--baseline-term", metavar="TERM", help=TERM_HELP),
    baseline_rate: str | None = maybe_flag(
        "--baseline-rate", metavar="USD_PER_H", help="Your own baseline $/h."
    ),
    baseline_count: str = typer.Option(
        "1", "--baseline-count", metavar="N", help="Baseline fleet size (ignored with --rps)."
    ),
    porting_days: str = typer.Option(
        DEFAULT_PORTING_DAYS,
        "--porting-days",
        metavar="DAYS",
        help="Engineer-days to port (an assumption).",
    ),
    day_rate: str | None = maybe_flag("--day-rate", metavar="USD", help=DAY_RATE_HELP),
    as_json: bool = JSON_TABLE_FLAG,
    catalog_file: str | None = CATALOG_FLAG,
) -> None:
    """Serving cost: $/1M requests = 1e6 / throughput x $/h / 3600 / utilization, and the monthly bill."""
    tput = flag_number(throughput, "--throughput")
    util = flag_number(utilization, "--utilization")
    if util > 1:
        raise ChipswapError(f"--utilization must be in (0, 1], got {utilization}; pass e.g. 0.6 for 60 %")
    hpm = flag_number(hours_per_month, "--hours-per-month", example="--hours-per-month 730")
    if hpm > MAX_HOURS_PER_MONTH:
        raise ChipswapError(
            f"--hours-per-month must be at most {MAX_HOURS_PER_MONTH} (31 days x 24 h),"
            f" got {hours_per_month};"
            " pass e.g. --hours-per-month 730"
        )
    req = optional_number(rps, "--rps")
    count = flag_count(count, "--count")
    baseline_count = flag_count(baseline_count, "--baseline-count")
    user_rate = optional_number(rate_usd, "--rate", allow_zero=True)
    res = flag_reserved(reserved, "--reserved")
    t = flag_term(term, "--term")
    days = flag_number(porting_days, "--porting-days", allow_zero=True)
    found = _defaults(region_flag, day_rate, catalog_file)
    region_flag, catalog_file = _given_region(found), found["catalog"].value
    day = flag_number(found["day_rate"].value, "--day-rate", allow_zero=True)
    if baseline is not None and baseline_throughput is None:
        raise ChipswapError("--baseline needs --baseline-throughput; pass the baseline's requests per second")
    if baseline is None and baseline_throughput is not None:
        raise ChipswapError("--baseline-throughput needs --baseline; pass the instance serving today")
    b_tput = optional_number(baseline_throughput, "--baseline-throughput")
    b_user = optional_number(baseline_rate, "--baseline-rate", allow_zero=True)
    b_term = flag_term(baseline_term, "--baseline-term")

    catalog = load_catalog(catalog_file)
    check_region(catalog, region_flag)
    region = region_flag or DEFAULT_REGION
    inst = catalog.instance(instance)
    if user_rate is not None:
        r = _user_rate(inst.name, region, user_rate, "--rate")
    elif res is not None:
        r = catalog.rate(inst.name, region, res)
    else:
        r = priced(catalog, inst.name, region_flag, t)
    sides = [("candidate" if baseline else "serve", inst.name, r, tput, count)]
    if baseline is not None:
        b_inst = catalog.instance(baseline)
        br = (
            _user_rate(b_inst.name, region, b_user, "--baseline-rate")
            if b_user is not None
            else priced(catalog, b_inst.name, region_flag, b_term)
        )
        sides.insert(0, ("baseline", b_inst.name, br, b_tput, baseline_count))

    rows = []
    for label, name, rate, tp, n in sides:
        fleet = C.fleet_size(req, tp, util) if req is not None else n
        if ranges.problem(fleet, ranges.Spec("instances")):
            raise ChipswapError(
                f"--rps {req.normalize():f} at {tp.normalize():f} requests/s per {name} and --utilization "
                f"{util.normalize():f} needs {fleet:,} instances, outside "
                f"{ranges.span(ranges.Spec('instances'))}; check --rps, the throughput and --utilization"
            )
        rows.append(
            {
                "role": label,
                "instance": name,
                "rate": rate,
                "throughput": tp,
                "count": fleet,
                "per_million": C.cost_per_million(tp, rate.usd_per_hour, util),
                # a Capacity Block bills every hour it is held: 730 h a month, whatever is used
                "monthly": C.monthly_cost(
                    rate.usd_per_hour, fleet, C.HOURS_PER_MONTH if rate.is_capacity_block else hpm
                ),
            }
        )
    summary = None
    if baseline is not None:
        b, c = rows
        cmp = C.compare(b["monthly"], c["monthly"]) if b["monthly"] > 0 else None
        one_time = C.porting_cost(days, day)
        be = C.break_even(one_time, b["monthly"] - c["monthly"], max_periods=120)
        summary = {
            "comparison": cmp,
            "per_million_saving_pct": C.compare(b["per_million"], c["per_million"]).saving_pct
            if b["per_million"] > 0
            else None,
            "porting": one_time,
            "break_even": be,
        }
    assumptions = [
        f"utilization {util.normalize():f} (busy fraction; $/1M is divided by it); "
        f"{hpm.normalize():f} billed h/month",
        "fleet sized from --rps: ceil(rps / (throughput x utilization))"
        if req is not None
        else "fleet size from --count/--baseline-count (pass --rps to size both fleets for the same traffic)",
    ]
    if summary:
        assumptions.append(
            f"porting cost {money(summary['porting'])} = {days.normalize():f} engineer-days x "
            f"${day.normalize():,f}/day{origin_words(found['day_rate'])} (assumption); pays back in the "
            "first month whose cumulative saving covers it (checked up to 120 months)"
        )
    for row in rows:
        rr = row["rate"]
        assumptions.append(
            f"{row['instance']} {rr.term} price: {one_line(rr.source)} ({one_line(_as_of(rr))})"
            + (f"; {rr.note}" if rr.note and rr.term != "on-demand" else "")
        )
        if rr.is_capacity_block:
            assumptions += block_lines(catalog, rr, region_flag)
            assumptions.append(
                f"{row['instance']} per month: held as a chain of Capacity Blocks (at most 182 days each), "
                f"every hour billed ({C.HOURS_PER_MONTH} h/month), renewals assumed at today's rate "
                "(an assumption: the price is dynamic and each renewal is a new booking, not guaranteed)"
            )
    if as_json:
        typer.echo(json.dumps(_serve_json(rows, summary, region, util, req, hpm, assumptions), indent=2))
        return
    out = console()
    table = Table(title=f"Serving cost ({region})")
    cols = ("", "instance", "region", "term", "$/h", "req/s each", "$ per 1M req", "instances", "per month")
    for col in cols:
        table.add_column(col, justify="left" if col in ("", "instance", "region", "term") else "right")
    for row in rows:
        table.add_row(
            row["role"],
            row["instance"],
            row["rate"].region,
            term_words(row["rate"]),
            rate_text(row["rate"].usd_per_hour),
            f"{row['throughput'].normalize():f}",
            f"${row['per_million'].quantize(Decimal('0.0001')):,}",
            str(row["count"]),
            money(row["monthly"]),
        )
    print_table(out, table)
    if summary:
        cmp, be = summary["comparison"], summary["break_even"]
        saving = rows[0]["monthly"] - rows[1]["monthly"]
        text = f"saving per month: {money(saving)}"
        if cmp is not None:
            text += f" ({pct(cmp.saving_pct)})"
        if summary["per_million_saving_pct"] is not None:
            text += f"; per 1M requests: {pct(summary['per_million_saving_pct'])}"
        text += "; porting pays back in " + (
            "month " + str(be.period) if be.period else "never (within 120 months)"
        )
        out.print(text, markup=False, highlight=False)
    for a in assumptions:
        out.print(f"- {a}", markup=False, highlight=False)


def _serve_json(
    rows: list[dict],
    summary: dict | None,
    region: str,
    util: Decimal,
    req: Decimal | None,
    hpm: Decimal,
    assumptions: list[str],
) -> dict:
    out: dict = {
        "region": region,
        "utilization": float(util),
        "rps": float(req) if req is not None else None,
        "hours_per_month": float(hpm),
        "fleets": [
            {
                "role": r["role"],
                "instance": r["instance"],
                **_rate_json(r["rate"]),
                "throughput_per_s": float(r["throughput"]),
                "count": r["count"],
                "usd_per_million": _n(r["per_million"], "0.0001"),
                "monthly_usd": _n(r["monthly"]),
            }
            for r in rows
        ],
        "assumptions": assumptions,
    }
    if summary:
        be = summary["break_even"]
        out["saving_per_month_usd"] = _n(rows[0]["monthly"] - rows[1]["monthly"])
        out["saving_pct"] = _n(summary["comparison"].saving_pct, "0.1") if summary["comparison"] else None
        out["porting_usd"] = _n(summary["porting"])
        out["pays_back_month"] = be.period
    return out


def register(app: typer.Typer) -> None:
    app.add_typer(cost_app, name="cost")
