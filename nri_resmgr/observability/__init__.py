"""What the daemon shows of itself, as supervised services.

- ``server``: the HTTP service (hypercorn under trio) answering /metrics, /healthz and /readyz
  on ``instrumentation.httpEndpoint`` (parsed by ``endpoint``), rebound on reconfigure;
- ``nrt``: the node's NodeResourceTopology object, kept current from the policy's zones;
- ``setup``: wiring these, and the ``log`` section, into the daemon.

The instruments they read (counters, readiness, the policy's gauges and zones) live in
``nri_resmgr.instrumentation``, below everything that updates them.
"""
