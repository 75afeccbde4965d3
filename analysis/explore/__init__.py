"""What users ask of the model: schedules side by side, sweeps of hypothetical GPUs, the tile
search, the demo and the paper's figures."""
