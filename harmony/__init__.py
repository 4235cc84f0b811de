"""Harmony: train DNNs whose training state exceeds GPU memory (VLDB'22), reimplemented.

Stages (each a `harmony` subcommand, each writing one JSON artifact):
  decompose -> model.json, profile -> profile.json, calibrate -> calibration.json,
  schedule -> schedule.json (+ search.csv, trace.json.gz), run -> run.jsonl.
Baselines (`harmony baseline NAME ...`) write run.jsonl with the same schema.
"""
__version__ = "0.1.0"
