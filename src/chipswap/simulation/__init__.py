"""Simulation: trace-driven discrete-event simulation of a serving fleet, and fleet sizing for an SLO.

All pure (no files, clock, torch or printing):
- servicetime.py  the ServiceTimes protocol: the seam between where a speed comes from and the simulator;
- simulate.py     the simulator's entry: `simulate` picks the engine for the setup's scheduler policy;
- traffic.py      requests, synthetic arrivals, scaling by superposition, repeating, the busiest window;
- model.py        ReplicaSetup (policy, token budget, KV blocks), results, rejects, step-time tables;
- policies.py     the named scheduler policies and the serving stack each models (`scheduler_policy_for`);
- engine.py       the closed-form engine (prefill-first / static slots, per-replica queues);
- steps.py        the step scheduler (chunked prefill, paged KV cache with preemption, shared queue);
- encoder.py      dynamic batching for encoders;
- validation.py   checks against published loaded runs and Erlang C;
- fleet.py        the smallest fleet whose simulated tail latency meets the SLO at the busiest window.
The naive reference simulator the tests compare against lives in tests/simulate_reference.py.
"""
