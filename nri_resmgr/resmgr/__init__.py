"""The resource manager: the one lock (``manager``), the contract a policy fulfils
(``policy``), and what it knows of pods and containers (``model``)."""
