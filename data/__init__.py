"""The committed GPU measurements, probe output and instruction census (package data).

Nothing here is code the package imports; the scripts in gpu/probe and gpu/runs run on the GPU
machine as scripts (each raw output names the command that wrote it)."""
