"""``python -m tests.bench`` (``nox -s bench``): our daemon against the Go nri-plugins.

Everything runs in one process tree: this process drives one Go NRI harness per contender
(the real runtime side, github.com/containerd/nri v0.12) and the plugin processes they
serve, alternating measurements between contenders so machine noise hits all of them. The
results go to ``bench-results/`` (``bench.json``, ``latency.png``) and one table on stdout.
"""
