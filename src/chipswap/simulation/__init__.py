"""Simulation: trace-driven discrete-event simulation of a serving fleet, and fleet sizing for an SLO.

All pure (no files, clock, torch or printing):
- servicetime.py  the ServiceTimes protocol: the seam between where a speed comes from and the simulator;
- simulate.py     the fast simulator (continuous / dynamic batching, Neuron bucket padding, dispatch);
- fleet.py        the smallest fleet whose simulated tail latency meets the SLO at the busiest window.
The naive reference simulator the tests compare against lives in tests/simulate_reference.py.
"""
