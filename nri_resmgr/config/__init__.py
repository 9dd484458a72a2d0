"""Configuration: the policy CR models and their strict YAML loader; no I/O beyond a file.

Where configurations come from at run time (the cluster's config CRs, a watched file) is
``nri_resmgr.agent``; the CRDs generated from these models, ``tools/crdschema.py``.
"""

from nri_resmgr.config.documents import dump_document, load_document, load_file
from nri_resmgr.config.loader import structure_spec
from nri_resmgr.config.models import PolicyDocument, PolicySpec

__all__ = [
    "PolicyDocument",
    "PolicySpec",
    "dump_document",
    "load_document",
    "load_file",
    "structure_spec",
]
