"""The seed's numeric claims, checked with chipswap's own projection, bands and catalog prices.

Each claim the seed states with a number becomes one or more ClaimLines: what is claimed, chipswap's figure
and its error band (or the reason chipswap refuses to give one), what would make the claim true, and where
every input comes from. `chipswap plan --example trn2-claims` prints them; scripts/gen_claims.py writes
docs/claims.md from render_markdown (a test checks the page against this code). Reads the catalog and the
projection's calibrated data through their APIs; writes nothing, prints nothing, no clock, no network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chipswap.economics.catalog import Catalog, Rate, term_words
from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError

SEED = "shared/seed/trainium-inferentia-vs-gpu.md"
PRICE_PERF = "AWS quotes 30 to 40 percent better price for performance on Trn2 versus P5e and P5en"
CUT = "a bill large enough that a 40 to 60 percent cut matters"
HOURS = "the same run on a trn1.32xlarge ... call it 26 hours"

# (model preset, prompt tokens, output tokens): standard Llama shapes, stated by chipswap (not measured)
SERVING_CASES: tuple[tuple[str, int, int], ...] = (
    ("llama-3-8b", 1024, 256),
    ("llama-3-8b", 128, 128),
    ("llama-3-70b", 1024, 256),
)
# (Neuron candidate, region to price it in) vs (GPU, region)
PRICE_PERF_PAIRS: tuple[tuple[str, str, str, str], ...] = (
    ("trn2.48xlarge", "us-east-2", "p5en.48xlarge", "us-east-1"),
    ("trn2.48xlarge", "us-east-2", "p5e.48xlarge", "us-east-1"),
)
CUT_PAIRS: tuple[tuple[str, str, str, str], ...] = (
    ("inf2.48xlarge", "us-east-1", "g6e.12xlarge", "us-east-1"),
    ("trn2.48xlarge", "us-east-2", "p5en.48xlarge", "us-east-1"),
)
# the worked example: 20 h on a p5.48xlarge, Llama 3 8B fine-tuning at 4,096-token sequences, bf16
WORKED: dict[str, str] = {"model": "llama-3-8b", "gpu": "p5.48xlarge", "trn": "trn1.32xlarge"}
WORKED_GPU_HOURS = 20.0
WORKED_SEQ = 4096


CALIB = "the serving calibration (data/platforms/physics.toml; its coverage in docs/projection.md)"
CATALOG = "the catalog (data/catalog/catalog.toml: every price with source and date)"
_NO_PRICE_FIX = "a price for it: `chipswap catalog refresh`, or your own rate in a --catalog file"
_NO_FIGURE_FIX = (
    "a measured figure at this shape: `chipswap trial` builds the kit, `chipswap plan --bench` reads it"
)


@dataclass(frozen=True)
class ClaimLine:
    claim: str  # the seed's words, short
    case: str  # what was evaluated
    claimed: str
    chipswap: str  # chipswap's figure, or "refused: <why>"
    band: str  # across the projection's error band ("-" when refused)
    true_if: str  # what would make the claim true
    source: str  # where the inputs come from (prices with source and date, projection)

    @property
    def refused(self) -> bool:
        return self.chipswap.startswith("refused")


@dataclass(frozen=True)
class _Priced:
    rate: Rate | None
    why: str  # why there is no price, when there is none

    def words(self) -> str:
        r = self.rate
        assert r is not None
        return f"{r.instance} ${r.usd_per_hour}/h ({term_words(r)}, {r.region}, {r.source}, {r.as_of})"


def _price(catalog: Catalog, instance: str, region: str) -> _Priced:
    r = catalog.purchase_rate(instance, region, "on-demand")
    if r is not None:
        return _Priced(r, "")
    note = catalog.instance(instance).price_note
    anywhere = any(r.term != "spot" for r in catalog.rates_for(instance))
    where = f"in {region}" if anywhere else "in any region (spot aside)"
    return _Priced(None, f"no published price for {instance} {where}" + (f": {note}" if note else ""))


def _pct(x: float) -> str:
    return f"{x:+.0f} %"


def _cut(x: float) -> str:
    """A cut in percent; a negative one said as what it is."""
    return f"{x:.0f} % cut" if x >= 0 else f"no cut: costs {1 - x / 100:.1f}x as much ({x:.0f} %)"


def _serving(work: Any, instance: str, prompt: int, output: int, catalog: Catalog) -> Any:
    from chipswap.projection.api import project_serving

    p = project_serving(work, instance, prompt_tokens=prompt, output_tokens=output, catalog=catalog)
    if not p.fits or p.requests_per_s is None:
        raise ChipswapError(p.reason or f"{work.name} does not fit {instance}")
    return p.requests_per_s


def _shape(model: str, prompt: int, output: int) -> str:
    return f"serving {model}, {prompt:,} prompt + {output:,} output tokens"


def _projection_words(n: Any, g: Any, trn: str, gpu: str) -> str:
    return (
        f"projected {n.value:,.3g} req/s on {trn} (±{n.band:.0%}) and {g.value:,.3g} on {gpu} "
        f"(±{g.band:.0%}), "
        "chipswap's calibrated roofline (`chipswap project`), whole instance, no latency objective"
    )


def _serving_pair(
    work: Any, case: tuple[str, int, int], pair: tuple[str, str, str, str], catalog: Catalog
) -> tuple[Any, Any, _Priced, _Priced] | str:
    """(neuron req/s, gpu req/s, neuron price, gpu price), or the reason one is missing."""
    trn, trn_region, gpu, gpu_region = pair
    pn, pg = _price(catalog, trn, trn_region), _price(catalog, gpu, gpu_region)
    if pn.rate is None or pg.rate is None:
        return pn.why or pg.why
    try:
        n = _serving(work, trn, case[1], case[2], catalog)
        g = _serving(work, gpu, case[1], case[2], catalog)
    except ChipswapError as exc:
        return _NO_FIGURE + str(exc)
    return n, g, pn, pg


_NO_FIGURE = "no figure: "  # a projection refused (not a price): the fix is a measurement, not a catalog


def _refused(claim: str, what: str, claimed: str, got: str) -> ClaimLine:
    """The line of a refused pair: a projection outside the calibration wants a measurement, a missing
    price a catalog entry."""
    if got.startswith(_NO_FIGURE):
        return ClaimLine(
            claim, what, claimed, f"refused: {got[len(_NO_FIGURE) :]}", "-", _NO_FIGURE_FIX, CALIB
        )
    return ClaimLine(claim, what, claimed, f"refused: {got}", "-", _NO_PRICE_FIX, CATALOG)


def price_performance_lines(catalog: Catalog) -> list[ClaimLine]:
    from chipswap.projection.api import model_work

    out = []
    for k, case in enumerate(SERVING_CASES):
        work = model_work(case[0])
        for j, pair in enumerate(PRICE_PERF_PAIRS):
            if j > 0 and k > 0:
                continue  # the other GPUs once, at the first shape (a missing price is the same everywhere)
            trn, _, gpu, _ = pair
            what = f"{_shape(*case)}: {trn} vs {gpu}"
            got = _serving_pair(work, case, pair, catalog)
            if isinstance(got, str):
                out.append(_refused(PRICE_PERF, what, "+30 to +40 %", got))
                continue
            n, g, pn, pg = got
            assert pn.rate is not None and pg.rate is not None
            cost_n, cost_g = float(pn.rate.usd_per_hour), float(pg.rate.usd_per_hour)
            ratio = (n.value / cost_n) / (g.value / cost_g)
            lo = (n.low / cost_n) / (g.high / cost_g)
            hi = (n.high / cost_n) / (g.low / cost_g)
            need = 1.30 * g.value * cost_n / cost_g
            price = n.value / g.value * cost_g / 1.30
            out.append(
                ClaimLine(
                    PRICE_PERF,
                    what,
                    "+30 to +40 %",
                    f"{_pct((ratio - 1) * 100)} (requests/s per $/h)",
                    f"{_pct((lo - 1) * 100)} to {_pct((hi - 1) * 100)}",
                    f"+30 % needs {need:,.3g} req/s on {trn} (projected {n.value:,.3g}), or {trn} at "
                    f"${price:,.2f}/h or less",
                    f"{_projection_words(n, g, trn, gpu)}; prices {pn.words()} and {pg.words()}",
                )
            )
    out += _training_price_performance(catalog)
    return out


def _training_price_performance(catalog: Catalog) -> list[ClaimLine]:
    """Training tokens/s per $/h on trn2.48xlarge (Capacity Block) against p5en.48xlarge (on demand), bf16
    and fp8 on both sides: trn2 by transfer from trn1's calibration (projection.training.transfer) with its
    measured transfer band, H200 by transfer from H100; and the worked example's run on trn2 priced as one
    Capacity Block of whole days. A measured trn2 figure outranks every number here."""
    from chipswap.economics.catalog import block_days_covering
    from chipswap.projection.api import model_work
    from chipswap.projection.training import project_training

    trn, trn_region, gpu, gpu_region = PRICE_PERF_PAIRS[0]
    work = model_work(WORKED["model"])
    pn, pg = _price(catalog, trn, trn_region), _price(catalog, gpu, gpu_region)
    out = []
    for dtype in ("bf16", "fp8"):
        what = f"training {WORKED['model']}, {WORKED_SEQ:,}-token sequences, {dtype} on both: {trn} vs {gpu}"
        try:
            n = project_training(work, trn, seq_len=WORKED_SEQ, dtype=dtype, catalog=catalog)
            g = project_training(work, gpu, seq_len=WORKED_SEQ, dtype=dtype, catalog=catalog)
        except ChipswapError as exc:
            out.append(ClaimLine(PRICE_PERF, what, "+30 to +40 %", f"refused: {exc}", "-", _MEASURE_TRN2,
                                 "data/training/calibration.toml"))  # fmt: skip
            continue
        if pn.rate is None or pg.rate is None:
            out.append(_refused(PRICE_PERF, what, "+30 to +40 %", pn.why or pg.why))
            continue
        nv, gv = n.tokens_per_s_per_node, g.tokens_per_s_per_node
        cost_n, cost_g = float(pn.rate.usd_per_hour), float(pg.rate.usd_per_hour)
        ratio = (nv.value / cost_n) / (gv.value / cost_g)
        lo = (nv.low / cost_n) / (gv.high / cost_g)
        hi = (nv.high / cost_n) / (gv.low / cost_g)
        need = 1.30 * gv.value * cost_n / cost_g
        run_tokens = _worked(catalog)[2]
        hours = run_tokens / nv.value / 3600.0
        days = block_days_covering(round(hours, 6))
        block = (
            f"; the worked example's run ({run_tokens:,.3g} tokens) takes {hours:,.1f} h on {trn}: one "
            f"{days}-day Capacity Block, ${days * 24 * cost_n:,.0f} paid up front"
            if days is not None
            else ""
        )
        out.append(
            ClaimLine(
                PRICE_PERF,
                what,
                "+30 to +40 %",
                f"{_pct((ratio - 1) * 100)} (training tokens/s per $/h){block}",
                f"{_pct((lo - 1) * 100)} to {_pct((hi - 1) * 100)}",
                f"+30 % needs {need:,.0f} tokens/s on {trn} (projected {nv.value:,.0f}); "
                + _MEASURE_TRN2,
                f"projected {nv.value:,.0f} tokens/s per node on {trn} (±{nv.band:.0%}, {n.band_basis}) and "
                f"{gv.value:,.0f} on {gpu} (±{gv.band:.0%}, {g.band_basis}); `chipswap project "
                f"{WORKED['model']} -i {trn} --train-tokens ... --train-dtype {dtype}`; prices {pn.words()} "
                f"and {pg.words()}",
            )
        )
    return out


_MEASURE_TRN2 = (
    "a measured trn2 training throughput outranks this (`chipswap plan --bench`, or job.candidates hours "
    'with source = "measured")'
)


def cut_lines(catalog: Catalog) -> list[ClaimLine]:
    from chipswap.projection.api import model_work

    out = []
    case = SERVING_CASES[0]
    work = model_work(case[0])
    for pair in CUT_PAIRS:
        trn, _, gpu, _ = pair
        what = f"{_shape(*case)}: cost per 1M requests, {trn} vs {gpu}"
        got = _serving_pair(work, case, pair, catalog)
        if isinstance(got, str):
            out.append(_refused(CUT, what, "40 to 60 % cut", got))
            continue
        n, g, pn, pg = got
        assert pn.rate is not None and pg.rate is not None
        cost_n, cost_g = float(pn.rate.usd_per_hour), float(pg.rate.usd_per_hour)

        def cut(nv: float, gv: float, cn: float = cost_n, cg: float = cost_g) -> float:
            return (1 - (cn / nv) / (cg / gv)) * 100

        need = cost_n * g.value / (cost_g * 0.60)  # 40 % cut: candidate $/request = 0.6 x GPU's
        out.append(
            ClaimLine(
                CUT,
                what,
                "40 to 60 % cut",
                _cut(cut(n.value, g.value)),
                f"{cut(n.low, g.high):.0f} % to {cut(n.high, g.low):.0f} %",
                f"a 40 % cut needs {need:,.3g} req/s on {trn} (projected {n.value:,.3g})",
                f"{_projection_words(n, g, trn, gpu)}; prices {pn.words()} and {pg.words()}",
            )
        )
    out.append(_worked_cut(catalog)[0])
    return out


def _worked(catalog: Catalog) -> tuple[Any, Any, float]:
    """(GPU training plan, trn1 plan, tokens): the run's size inferred from the seed's 20 h on the GPU."""
    from chipswap.projection.api import model_work
    from chipswap.projection.training.project import project_training

    work = model_work(WORKED["model"])
    seq = WORKED_SEQ
    gpu = project_training(work, WORKED["gpu"], seq_len=seq, catalog=catalog)
    tokens = gpu.tokens_per_s_per_node.value * WORKED_GPU_HOURS * 3600
    trn = project_training(work, WORKED["trn"], tokens=tokens, seq_len=seq, catalog=catalog)
    return gpu, trn, tokens


def _worked_cut(catalog: Catalog) -> tuple[ClaimLine, ClaimLine]:
    gpu, trn, tokens = _worked(catalog)
    gname, tname = WORKED["gpu"], WORKED["trn"]
    pg, pn = _price(catalog, gname, "us-east-1"), _price(catalog, tname, "us-east-1")
    assert pg.rate is not None and pn.rate is not None and trn.hours is not None
    g_hours = WORKED_GPU_HOURS
    cost_g = g_hours * float(pg.rate.usd_per_hour)
    rate_n = float(pn.rate.usd_per_hour)
    hours = trn.hours.value
    # the run's size rests on the GPU's projected throughput and the trn1 hours on trn1's: both bands
    band = (1 + gpu.tokens_per_s_per_node.band) * (1 + trn.tokens_per_s_per_node.band) - 1
    low, high = hours / (1 + band), hours * (1 + band)
    cut = (1 - hours * rate_n / cost_g) * 100
    lo, hi = (1 - high * rate_n / cost_g) * 100, (1 - low * rate_n / cost_g) * 100
    need_h = 0.60 * cost_g / rate_n
    tps = trn.tokens_per_s_per_node.value
    run = (
        f"the worked example's run ({tokens:,.3g} tokens: the seed's {g_hours:g} h on {gname} x its "
        f"projected {gpu.tokens_per_s_per_node.value:,.0f} tokens/s)"
    )
    src = (
        f"training projection (`chipswap project {WORKED['model']} --train-tokens ...`, as `chipswap plan "
        f"--example finetune`): {gname} {gpu.tokens_per_s_per_node.value:,.0f} tokens/s "
        f"(±{gpu.tokens_per_s_per_node.band:.0%}), {tname} {tps:,.0f} tokens/s "
        f"(±{trn.tokens_per_s_per_node.band:.0%}); prices {pg.words()} and {pn.words()}"
    )
    cut_line = ClaimLine(
        CUT,
        f"{run}: job cost, {tname} on demand vs {gname}",
        "40 to 60 % cut (the seed's own example: 49 %)",
        _cut(cut),
        f"{lo:.0f} % to {hi:.0f} %",
        f"a 40 % cut needs the run in {need_h:,.1f} h or less on {tname} (projected {hours:,.1f} h)",
        src,
    )
    need = tokens / (26 * 3600)
    hours_line = ClaimLine(
        HOURS,
        f"{run} on {tname}, bf16 like for like",
        "26 h",
        f"{hours:,.1f} h",
        f"{low:,.1f} to {high:,.1f} h (±{band:.0%})",
        f"26 h needs {need:,.0f} tokens/s on {tname} ({need / tps:.1f}x the projected {tps:,.0f})",
        src,
    )
    return cut_line, hours_line


def evaluate_claims(catalog: Catalog | None = None) -> tuple[ClaimLine, ...]:
    """Every checked claim, in the page's order: price performance, the cut, the worked example's hours."""
    cat = catalog or load_catalog()
    return (*price_performance_lines(cat), *cut_lines(cat), _worked_cut(cat)[1])


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(lines: tuple[ClaimLine, ...]) -> str:
    """docs/claims.md: a table row per line (claimed / chipswap (band) / what would make it true / source)."""
    head = [
        "# The seed's claims, checked",
        "",
        "GENERATED by `scripts/gen_claims.py` from `chipswap.plan.claims` (the same lines as `chipswap plan "
        "--example trn2-claims`); do not edit by hand. `tests/test_claims.py` fails when this page and the "
        "code disagree: after the projection or the catalog changes, re-run the script.",
        "",
        f"Each numeric statement of the seed ({SEED}) evaluated with chipswap's own projection (calibrated "
        "on published benchmark tables, each figure ± its held-out error band) and the catalog's prices "
        "(each with source and date). Throughputs are projected, not measured: a measurement of your own "
        "(`chipswap bench`, `chipswap plan --bench`) outranks every line here. Where chipswap has no "
        "calibration or no price it says so and gives no number. trn2 is priced at its EC2 Capacity Block "
        "rate (the only rate any source gives: booked ahead, paid up front, dynamic price), the GPUs on "
        "demand: the terms differ, and the page says which beside every price.",
        "",
        "| claim | case | claimed | chipswap | band | what would make it true | source |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = [
        "| " + " | ".join(_cell(x) for x in (ln.claim, ln.case, ln.claimed, ln.chipswap, ln.band, ln.true_if,
                                              ln.source)) + " |"
        for ln in lines
    ]  # fmt: skip
    return "\n".join(head + rows) + "\n"


def render_text(lines: tuple[ClaimLine, ...]) -> list[str]:
    """The lines for a terminal: one block per line."""
    out = [f"The seed's claims, checked ({SEED}); every figure projected ± its band, prices with source"]
    for ln in lines:
        out += [
            f"- {ln.claim}: {ln.case}",
            f"    claimed {ln.claimed}; chipswap {ln.chipswap}"
            + (f" (band {ln.band})" if ln.band != "-" else ""),
            f"    true if: {ln.true_if}",
            f"    source: {ln.source}",
        ]
    return out


def as_json(lines: tuple[ClaimLine, ...]) -> list[dict[str, Any]]:
    return [{**ln.__dict__, "refused": ln.refused} for ln in lines]
