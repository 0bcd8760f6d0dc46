"""Serving room of the projection: the one physical time model per phase (physics.py) that every chip
family and stack goes through. The layout search and the serving projection (chipswap.projection.predict,
layouts) call it; the fitting room (chipswap.projection.fitting) calibrates its free parameters."""
