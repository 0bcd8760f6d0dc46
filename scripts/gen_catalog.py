"""Generate src/chipswap/data/catalog/catalog.toml from the shared reference CSVs.

Usage:  python scripts/gen_catalog.py /path/to/shared  [--out src/chipswap/data/catalog/catalog.toml]

Reads only <shared>/reference/pricing/*.csv and <shared>/reference/neuron-benchmarks/*prices*.csv.
The output is committed; the package never needs shared/ at runtime. Unknown prices are left out
(never guessed); the reason is kept in the instance's `price_note`.
"""

from __future__ import annotations

import argparse
import csv
import sys
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from chipswap.economics.catalog_io import price_groups_toml, toml_value  # noqa: E402  (the TOML writer is shared)

FAMILIES = (
    "trn1",
    "trn1n",
    "trn2",
    "inf1",
    "inf2",
    "p4d",
    "p4de",
    "p5",
    "p5e",
    "p5en",
    "p6-b200",
    "g5",
    "g6",
    "g6e",
)
KIND = {
    "Inferentia": "inferentia",
    "Inferentia2": "inferentia",
    "Trainium": "trainium",
    "Trainium2": "trainium",
}

SOURCES = {
    "skypilot-v8": (
        "skypilot-org/skypilot-catalog catalogs/v8/aws/vms.csv @e385a0d3 (undated crawl; content is from "
        "2025-08-25 or later: it has p5.4xlarge and the June-2025 GPU price cut)"
    ),
    "karpenter-2026-07-20": (
        "aws/karpenter-provider-aws pkg/providers/pricing/zz_generated.pricing_aws.go @6fc13b52 "
        "('generated at 2026-07-20T13:44:30Z for us-east-1'); matches skypilot-v8 where both have a price"
    ),
    "karpenter-specs": (
        "aws/karpenter-provider-aws website/content/en/docs/reference/instance-types.md (blob f22c5c00)"
    ),
    "neuron-ri-effective": (
        "aws-neuron/aws-neuron-sdk@81ce03ae about-neuron/benchmarks/{inf1,inf2,trn1}/*instance_prices.csv "
        "column 'RI-Effective hourly rate' (US East N. Virginia; term and payment option NOT stated; first "
        "published 2024-09-16, unchanged at 2026-08-21)"
    ),
    "seed-article": (
        "seed article 'Trainium and Inferentia vs GPU' (shared/seed/trainium-inferentia-vs-gpu.md): "
        "trn1.32xlarge ~$13.23/h on a 1-year and ~$8.20/h on a 3-year commitment, US East; "
        "the article is undated and cites Neuron SDK 2.26"
    ),
    "neuron-docs": "aws-neuron/aws-neuron-sdk@81ce03ae about-neuron/arch/neuron-hardware/*.rst (2026-08-21)",
    "ml-engineering": "stas00/ml-engineering@7bc7c305 compute/accelerator/README.md (2026-08-10)",
    "cb-research-note-2026": (
        "aws.amazon.com/ec2/capacityblocks/pricing, as quoted (with the accelerator rate $2.235/h) by a "
        "public 2026 research note on Trainium serving economics; "
        "shared/reference/pricing/capacity_blocks_trn2_2026.csv"
        " (four independent 2026 sources agree on $2.235 per Trainium2 accelerator-hour)"
    ),
    "cb-page-capture-2026-08-06": (
        "capture of aws.amazon.com/ec2/capacityblocks/pricing in a public repository, 2026-08-06; "
        "shared/reference/pricing/capacity_blocks_trn2_2026.csv"
    ),
}
# capacity_blocks_trn2_2026.csv: its `source` column -> a [sources] key (rows whose region is not a region,
# e.g. an author's cost line, are not prices of an instance and are left out)
CB_SOURCES = {
    "aws.amazon.com/ec2/capacityblocks/pricing, as quoted": "cb-research-note-2026",
    "same research note": "cb-research-note-2026",
    "capture of aws.amazon.com/ec2/capacityblocks/pricing": "cb-page-capture-2026-08-06",
}
SPOT_NOTE = "spot observed once per AZ when the crawl ran; value is the median over AZs"


def dec(text: str) -> Decimal | None:
    text = (text or "").strip()
    return Decimal(text) if text else None


q = toml_value


def table(name: str, fields: dict) -> str:
    lines = [f"[[{name}]]"]
    lines += [f"{k} = {q(v)}" for k, v in fields.items() if v is not None and v != ""]
    return "\n".join(lines) + "\n"


def num(text: str) -> Decimal | int | None:
    d = dec(text)
    if d is None:
        return None
    return int(d) if d == d.to_integral_value() else d


def gib_per_s_to_gb_s(value: Decimal, unit: str) -> Decimal:
    unit = unit.strip()
    if unit == "GiB/s":
        return (value * Decimal(1024**3) / Decimal(10**9)).quantize(Decimal("0.1"))
    if unit == "TB/s":
        return value * 1000
    if unit == "GB/s":
        return value
    raise SystemExit(f"unknown bandwidth unit {unit!r}")


CHIP_NAMES = {
    "A100-40GB SXM4": "A100",
    "A100-80GB SXM4": "A100-80GB",
    "H100 SXM5": "H100",
    "H200 SXM": "H200",
}
CHIPS = (
    "Inferentia",
    "Inferentia2",
    "Trainium",
    "Trainium2",
    "Trainium3",
    "A10G",
    "L4",
    "L40S",
    "A100",
    "A100-80GB",
    "H100",
    "H200",
    "B200",
)
CHIP_AS_OF = {"AWS Neuron docs": "2026-08-21", "ml-engineering": "2026-08-10"}


def chips(pricing: Path) -> list[str]:
    out = []
    for row in csv.DictReader(open(pricing / "accelerator_specs.csv", encoding="utf-8")):
        name = CHIP_NAMES.get(row["accelerator"], row["accelerator"])
        if name not in CHIPS:
            continue
        tflops = {}
        for key, col in (
            ("fp32", "fp32_tflops"),
            ("tf32", "tf32_tflops_dense"),
            ("bf16", "bf16_tflops_dense"),
            ("fp16", "fp16_tflops_dense"),
            ("fp8", "fp8_tflops_dense"),
            ("int8", "int8_tops_dense"),
            ("fp4", "fp4_tflops_dense"),
        ):
            v = num(row[col])
            if v is not None:
                tflops[key] = v
        mib = dec(row["ec2_reported_mem_mib"])
        if mib is not None:
            mem = (mib / 1024).quantize(Decimal("0.01")).normalize()
        else:
            assert row["mem_capacity_unit"] == "GiB", row
            mem = num(row["mem_capacity"])
        bw = gib_per_s_to_gb_s(Decimal(row["mem_bw"]), row["mem_bw_unit"]).normalize()
        link = dec(row["interconnect_bw_per_chip"])
        link_gb = (
            gib_per_s_to_gb_s(link, row["interconnect_bw_unit"]).normalize() if link is not None else None
        )
        src = row["source"]
        as_of = "undated"
        for key, date in CHIP_AS_OF.items():
            if src.startswith(key):
                as_of = date
        out.append(
            table(
                "chip",
                {
                    "name": name,
                    "vendor": row["vendor"],
                    "kind": KIND.get(name, "gpu"),
                    "compute_units": row["compute_units_per_chip"],
                    "tflops_dense": tflops,
                    "memory_gib": mem,
                    "memory_type": row["mem_type"],
                    "memory_bandwidth_gb_s": bw,
                    "interconnect": row["chip_interconnect"],
                    "interconnect_gb_s": link_gb,
                    "sparse_note": row["sparse_peak_note"],
                    "confidence": row["confidence"],
                    "source": f"{src}: {row['source_ref']}",
                    "as_of": as_of,
                    "notes": row["notes"],
                },
            )
        )
    found = {
        CHIP_NAMES.get(r["accelerator"], r["accelerator"])
        for r in csv.DictReader(open(pricing / "accelerator_specs.csv", encoding="utf-8"))
    }
    missing = set(CHIPS) - found
    assert not missing, missing
    return out


REGIONS_NOTE = "regions skypilot-v8 crawls; a lower bound (newer regions are not crawled)"
GROUP_NOTE = {
    "spot": "spot observed once per AZ when the crawl ran; the value is the median over AZs "
    "(rows flagged as a "
    "10%-of-on-demand floor artifact are left out)",
    "1yr": "effective hourly rate of a 1-year commitment as the seed states it (payment option not stated)",
    "3yr": "effective hourly rate of a 3-year commitment as the seed states it (payment option not stated)",
    "ri-effective": "reserved-instance effective rate; term (1 or 3 years) and payment option NOT stated",
    "capacity-block": "EC2 Capacity Block rate per instance-hour: booked ahead, paid up front, price set by "
    "AWS on a schedule (the page named the next update for Oct 2026)",
}


def price_groups(prices: list[dict]) -> list[str]:
    return price_groups_toml(prices, GROUP_NOTE)


def instances_and_prices(shared: Path) -> tuple[list[str], list[dict]]:
    pricing = shared / "reference" / "pricing"
    rows = [
        r
        for r in csv.DictReader(open(pricing / "aws_accelerated_instances.csv", encoding="utf-8"))
        if r["family"] in FAMILIES
    ]
    summary = {
        r["instance_type"]: r
        for r in csv.DictReader(open(pricing / "aws_instance_summary.csv", encoding="utf-8"))
    }
    by_inst: dict[str, list[dict]] = {}
    for r in rows:
        by_inst.setdefault(r["instance_type"], []).append(r)

    def order(name: str) -> tuple:
        fam, size = name.split(".")
        n = size.replace("xlarge", "") or "1"
        return (FAMILIES.index(fam), int(n))

    inst_out, price_out = [], []
    for name in sorted(by_inst, key=order):
        rs = sorted(by_inst[name], key=lambda r: r["region"])
        r0 = rs[0]
        s = summary[name]
        accel = r0["accelerator_name"]
        no_price_regions = [r["region"] for r in rs if not r["ondemand_usd_hr"]]
        price_note = ""
        if no_price_regions:
            capacity_block = any("Capacity Blocks" in r["notes"] for r in rs)
            why = (
                "no public on-demand price in the source catalogs (sold mainly as EC2 Capacity Blocks for ML)"
                if capacity_block
                else "the price catalog lists it there without a price"
            )
            price_note = f"no on-demand price in {', '.join(no_price_regions)}: {why}"
        src = "skypilot-v8"
        if accel == "Trainium2":
            src = "skypilot-v8 + karpenter-specs + neuron-docs (no accelerator metadata in skypilot-v8)"
        inst_out.append(
            table(
                "instance",
                {
                    "name": name,
                    "family": r0["family"],
                    "kind": KIND.get(accel, "gpu"),
                    "accelerator": accel,
                    "accelerator_count": int(r0["accelerator_count"]),
                    "accelerator_memory_gib": num(r0["accelerator_mem_gib_total"]),
                    "neuron_cores": int(r0["neuron_cores_total"] or 0),
                    "vcpus": int(r0["vcpus"]),
                    "memory_gib": num(r0["memory_gib"]),
                    "network_gbps": num(r0["network_gbps"]),
                    "regions": [r["region"] for r in rs],
                    "regions_note": REGIONS_NOTE,
                    "local_nvme_gb": num(s.get("local_nvme_gb", "")),
                    "price_note": price_note,
                    "source": src,
                    "as_of": "2025-08-25",
                },
            )
        )
        for r in rs:
            od = dec(r["ondemand_usd_hr"])
            if od is not None:
                k = dec(r["ondemand_usd_hr_karpenter_2026_07_20"])
                if r["region"] == "us-east-1" and k is not None:
                    assert k == od, (name, k, od)
                    psrc, as_of = "karpenter-2026-07-20", "2026-07-20"
                else:
                    psrc, as_of = "skypilot-v8", "2025-08-25"
                price_out.append(
                    {
                        "instance": name,
                        "region": r["region"],
                        "term": "on-demand",
                        "usd_per_hour": od,
                        "source": psrc,
                        "as_of": as_of,
                    }
                )
            med = dec(r["spot_usd_hr_median"])
            if med is not None:
                if "10% of" in r["notes"]:
                    continue  # a floor artifact, not an observed market price: leave it out
                note = f"min {r['spot_usd_hr_min']}, max {r['spot_usd_hr_max']} over {r['az_count']} AZ(s)"
                price_out.append(
                    {
                        "instance": name,
                        "region": r["region"],
                        "term": "spot",
                        "usd_per_hour": med,
                        "source": "skypilot-v8",
                        "as_of": "2025-08-25",
                        "note": note,
                    }
                )
        if name == "trn1.32xlarge":
            for term, val in (("1yr", "13.23"), ("3yr", "8.20")):
                price_out.append(
                    {
                        "instance": name,
                        "region": "us-east-1",
                        "term": term,
                        "usd_per_hour": Decimal(val),
                        "source": "seed-article",
                        "as_of": "undated",
                    }
                )
    # Neuron benchmark pages: RI-effective rates (term not stated)
    bench = shared / "reference" / "neuron-benchmarks"
    for f in sorted(bench.glob("*prices*.csv")):
        for r in csv.DictReader(open(f, encoding="utf-8")):
            name = r["Inst. Type"].strip().lower()
            assert name in by_inst, name
            price_out.append(
                {
                    "instance": name,
                    "region": "us-east-1",
                    "term": "ri-effective",
                    "usd_per_hour": Decimal(r["RI-Effective hourly rate"].strip()),
                    "source": "neuron-ri-effective",
                    "as_of": "2026-08-21",
                }
            )
    missing = [f for f in FAMILIES if not any(n.startswith(f + ".") for n in by_inst)]
    assert not missing, missing
    return inst_out, price_out


TRN2_SMALL_NOTE = (
    "one Trainium2 chip; 8 NeuronCores and 96 GiB from the Trainium2 chip entry (neuron-docs); vCPUs and "
    "host memory are trn2.48xlarge's per chip (192/16, 2,048/16 GiB), stated, not from a source; regions are "
    "where "
    "capacity_blocks_trn2_2026.csv prices it (a lower bound)"
)
ULTRA_NOTE = (
    "Trn2 UltraServer: 4 x trn2u.48xlarge joined by NeuronLink (64 Trainium2 chips), "
    "neuron_instance_specs.csv "
    "from trn2-arch.rst; the v2.21 docs name it u-trn2x64; no price in any source and no region list"
)


def trn2_extras(shared: Path) -> tuple[list[str], list[dict]]:
    """trn2.3xlarge, the Trn2 UltraServer and the Capacity Block prices of capacity_blocks_trn2_2026.csv."""
    pricing = shared / "reference" / "pricing"
    specs = {r["instance_or_system"]: r for r in csv.DictReader(open(pricing / "neuron_instance_specs.csv"))}
    cb = list(csv.DictReader(open(pricing / "capacity_blocks_trn2_2026.csv", encoding="utf-8")))
    big = specs["trn2.48xlarge"]
    chips = int(big["chips"])
    small_regions = sorted(r["region"] for r in cb if r["instance_type"] == "trn2.3xlarge")
    ultra = next(v for k, v in specs.items() if k.startswith("Trn2 UltraServer"))
    inst = [
        table(
            "instance",
            {
                "name": "trn2.3xlarge",
                "family": "trn2",
                "kind": "trainium",
                "accelerator": "Trainium2",
                "accelerator_count": 1,
                "accelerator_memory_gib": num(big["device_mem_gib"]) // chips,
                "neuron_cores": int(big["neuron_cores"]) // chips,
                "vcpus": int(big["vcpus"]) // chips,
                "memory_gib": num(big["host_mem_gib"]) // chips,
                "regions": small_regions,
                "price_note": "sold as EC2 Capacity Blocks for ML; no on-demand price in any source",
                "source": "cb-page-capture-2026-08-06 + cb-research-note-2026 + neuron-docs; "
                + TRN2_SMALL_NOTE,
                "as_of": "2026-08-06",
            },
        ),
        table(
            "instance",
            {
                "name": "u-trn2x64",
                "family": "trn2u",
                "kind": "trainium",
                "accelerator": "Trainium2",
                "accelerator_count": int(ultra["chips"]),
                "accelerator_memory_gib": num(ultra["device_mem_gib"]),
                "neuron_cores": int(ultra["neuron_cores"]),
                "vcpus": int(ultra["vcpus"]),
                "memory_gib": num(ultra["host_mem_gib"]),
                "network_gbps": num(ultra["efa_gbps"]),
                "regions": [],
                "price_note": "no price in any source (UltraServers are sold as Capacity Blocks)",
                "source": "neuron-docs; " + ULTRA_NOTE,
                "as_of": "2026-08-21",
            },
        ),
    ]
    prices = []
    for r in cb:
        key = next((v for k, v in CB_SOURCES.items() if r["source"].startswith(k)), None)
        if key is None or not r["region"].startswith(("us-", "sa-", "ap-", "eu-", "ca-", "me-", "af-")):
            continue
        if "launch" in r["term"]:
            continue  # historical (2024-12); quoted in the current row's note
        note = f"${r['effective_accelerator_usd_hr']} per Trainium2 accelerator-hour ({r['region_name']})"
        if "(1 day)" in r["term"]:
            note += "; quoted for a 1-day block"
        if r["instance_type"] == "trn2.48xlarge":
            launch = next(x for x in cb if "launch" in x["term"])
            note += f"; launch rate ({launch['as_of']}) ${launch['effective_instance_usd_hr']}/h"
        prices.append(
            {
                "instance": r["instance_type"],
                "region": r["region"],
                "term": "capacity-block",
                "usd_per_hour": Decimal(r["effective_instance_usd_hr"]),
                "source": key,
                "as_of": r["as_of"],
                "note": note,
            }
        )
    return inst, prices


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shared", type=Path, help="path of the shared/ folder")
    ap.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "src/chipswap/data/catalog/catalog.toml",
    )
    args = ap.parse_args()
    inst, prices = instances_and_prices(args.shared)
    more_inst, cb_prices = trn2_extras(args.shared)
    at = next(n for n, t in enumerate(inst) if 'name = "trn2.48xlarge"' in t) + 1
    inst[at:at] = more_inst
    prices += cb_prices
    chip_tables = chips(args.shared / "reference" / "pricing")
    head = [
        "# chipswap instance / price / chip catalog.",
        "# GENERATED by scripts/gen_catalog.py from shared/reference;",
        "# edit the generator, not this file. Prices: USD per instance-hour, Linux, shared tenancy.",
        "# A price that is not known is absent (never guessed); see each instance's price_note.",
        "# terms: on-demand | spot (observed) | 1yr | 3yr (effective hourly)",
        "#        | ri-effective (term not stated)",
        "#        | capacity-block (EC2 Capacity Blocks for ML: booked ahead, paid up front, dynamic price)",
        "schema = 1",
        "",
        "[sources]",
    ]
    head += [f"{q(k)} = {q(v)}" for k, v in SOURCES.items()]
    text = (
        "\n".join(head)
        + "\n\n"
        + "\n".join(inst)
        + "\n"
        + "\n".join(chip_tables)
        + "\n"
        + "\n".join(price_groups(prices))
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}: {len(inst)} instances, {len(chip_tables)} chips, {len(prices)} prices")


if __name__ == "__main__":
    main()
