"""The GKE backend (seed 004): XPK / Pathways JobSets, their pods, nodes and events through
Kubernetes watches, pod logs, and Tunix metrics from TensorBoard event files."""

from console.services.capabilities import Capability

# What kind of cluster this is, in words: the TUI's header names it beside its name.
WORLD = "GKE + JobSets"

# What a GKE cluster can do (light to import: the wiring and the script parser read it).
CAPABILITIES = frozenset({Capability.WORKLOADS, Capability.RECOVER})
# The local GKE emulator's own verbs, on top (console.wiring.gke's chaos).
# The emulator also lets the console signal a pod's trainer: a checkpoint can be asked for.
EMULATED = frozenset({Capability.GKE_EMULATOR, Capability.CHECKPOINT})
