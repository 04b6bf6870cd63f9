"""The GKE backend (seed 004): XPK / Pathways JobSets, their pods, nodes and events through
Kubernetes watches, pod logs, and Tunix metrics from TensorBoard event files."""
