"""Experiment definitions, one module per fabric."""
