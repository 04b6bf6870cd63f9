"""``python -m emulators.tpu_pod serve|up|status|preempt|recreate|down``."""

from emulators.tpu_pod.cli import main

main()
