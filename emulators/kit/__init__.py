"""What the emulators share: the run-dir layout, the daemon's control channel and
process handling (``control``), and the pieces of their ``up|status|down`` CLIs.

Stdlib only and importing nothing of the console, the engine or the benchmarks: the
thin clients that import it are loaded on the console's first frame.
"""
