"""Stage 3, schedule: task graphs (tasks.py), packing, simulation and search."""
