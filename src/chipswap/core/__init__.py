"""Pure core: cost math, planner, rules, verdict, simulator. No file, clock, network or torch access here."""
