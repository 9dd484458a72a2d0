"""Where the configuration comes from while the daemon runs (nri-plugins' ``pkg/agent``).

- from the cluster: ``agent`` (the config agent service), ``tracker`` (the watches that decide
  this node's config CR), ``selection`` (which CR applies: pure rules), ``status`` (this
  node's entry in the CR's status);
- from a local file: ``filewatch`` (``--config-file``, re-read on change).

What a configuration is, and how it is read, is ``nri_resmgr.config``.
"""
