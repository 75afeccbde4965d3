"""Closed forms: exact IO counts per tensor, Θ and lower bounds, FLOPs and rooflines, SRAM
capacity of a tile, and the tiling rule B = M/(4d)."""
