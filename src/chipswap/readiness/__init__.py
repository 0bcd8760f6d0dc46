"""Readiness: will this model compile on Neuron, and what blocks it?

- rules.py      pure core: the rule engine (op inventory + rule tables -> op statuses and findings).
- capture/      the shell that turns a PyTorch / JAX model into an op inventory (torch.export, HLO).
- check.py      the orchestrator: model spec + shapes -> capture -> rules -> ReadinessReport
                (rules are data: data/neuron_rules/*.toml).

May not write files or print; every failure is a ChipswapError line.
"""
