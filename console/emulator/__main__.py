"""``python -m console.emulator serve|up|status|preempt|recreate|down``."""

from console.emulator.cli import main

main()
