"""Kubernetes' own printing rules, written once for both sides of our Kubernetes protocol.

The GKE emulator prints them as an API server does (server-side ``Table`` rows, what
``kubectl get`` shows); the console's GKE backend prints them from the pod objects its watches
deliver, as k9s does. Both must agree with upstream, so the rules live here, once: pure
functions over the API's JSON that import nothing of the console, the engine or the emulators
(a contract in pyproject.toml), so either side may import them.
"""
