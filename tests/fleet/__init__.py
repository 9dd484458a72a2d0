"""The fleet harness: N node agents against one real kube-apiserver + etcd (``nox -s fleet``).

See ``docs/fleet.md`` for what it measures, the figures and the model past them.
"""
