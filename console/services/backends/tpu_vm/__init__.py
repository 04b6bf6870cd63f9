"""The TPU VM backend (seed 000): the TPU API, SSH to every worker, a Ray cluster, its tunnel
and its jobs."""

from console.services.capabilities import Capability

# What kind of cluster this is, in words: the TUI's header names it beside its name.
WORLD = "TPU VM pod + Ray"

# What a TPU VM pod can do (light to import: the wiring and the script parser read it).
CAPABILITIES = frozenset(
    {
        Capability.HOSTS,
        Capability.VMS,
        Capability.RAY,
        Capability.TUNNEL,
        Capability.RAY_JOBS,
        Capability.RECOVER,
        Capability.CHECKPOINT,
    }
)
# The local pod emulator's own verbs, on top (console.wiring.pod's chaos).
EMULATED = frozenset({Capability.POD_EMULATOR})
