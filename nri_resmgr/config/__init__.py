"""Configuration: the policy CR models and their strict YAML loader."""

from nri_resmgr.config.loader import dump_document, load_document, load_file, structure_spec
from nri_resmgr.config.models import PolicyDocument, PolicySpec

__all__ = [
    "PolicyDocument",
    "PolicySpec",
    "dump_document",
    "load_document",
    "load_file",
    "structure_spec",
]
