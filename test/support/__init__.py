"""Helpers shared by the test modules (and bench/): wheels, indexes, eb, Lmod, Slurm, ELF files."""
