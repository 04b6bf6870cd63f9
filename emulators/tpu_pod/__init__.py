"""Local emulated spot TPU pod: SSH hosts on 127.0.0.(10+i), a TPU API, chaos.

Only ``client`` (stdlib) is meant for importing from elsewhere; the daemon
modules pull in asyncssh and grpc.
"""
