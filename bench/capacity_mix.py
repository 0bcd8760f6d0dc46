"""One capacity at any length mix (issue 40): `project`'s requests/s against the fleet simulator's saturation
rate for the same layout, GPU and Neuron, with every request the same and with a +-10 % spread on prompt and
output (the cases of tests/test_capacity_one_source.py). Prints a markdown table (docs/simulation.md, "One
source of capacity"). About 10 s.

    python bench/capacity_mix.py
"""

from __future__ import annotations

import argparse

import _results  # noqa: F401  (puts src/ and the repository root on the path)

CASES = (  # the parameters of tests/test_capacity_one_source.py::test_one_capacity_at_any_length_mix
    ("inf2.48xlarge", 8, 1024, 256, (1024, 2048), (1280, 2048)),
    ("trn2.48xlarge", None, 1500, 250, (512, 1024, 2048), (1024, 2048, 4096)),
    ("g6e.12xlarge", None, 1024, 256, None, None),
    ("p5.48xlarge", None, 1500, 250, None, None),
)


def row(instance, tp, prompt, output, buckets, decode, spread):
    from tests.test_capacity_one_source import mix_case  # the cases live with the test

    per, got, c = mix_case(instance, tp, prompt, output, buckets, decode, spread)
    return (f"| {instance} | TP{c.tp_degree} x {c.replicas}, batch {c.max_batch} | {prompt} / {output} | "
            f"{'+-10 %' if spread else 'none'} | {per:.3f} | {got:.3f} | {got / per - 1:+.1%} |")  # fmt: skip


def main() -> None:
    argparse.ArgumentParser().parse_args()
    print("| instance | layout | prompt / output | spread | project req/s per replica | simulated | error |")
    print("|---|---|---|---|---|---|---|")
    for case in CASES:
        for spread in (0.0, 0.1):
            print(row(*case, spread), flush=True)


if __name__ == "__main__":
    main()
