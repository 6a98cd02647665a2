"""The credential gateway: a process of its own that holds the secrets tools need and adds them
to outgoing requests, for listed destinations, methods and paths only.

A tool reaches a destination as `<gateway>/<name>/<path>`; the gateway checks the name, the
kill switch (revocations in the store, core/store/revocations.py), the method and path against
the destination's allowlist and its rate limit, injects the credential, forwards the request to
the destination's upstream, and writes one audit line (never the credential, never a body).
The worker and the agent never hold the secret: it lives in the gateway's own environment or in
a file only the gateway can read.

- config.py: the destinations, read from `WAKEFUL_GATEWAY_CONFIG` (TOML)
- server.py: the WSGI app and the process (`wakeful gateway`)
- client.py: how a tool calls it (`wakeful.agents.Gateway`)
"""
