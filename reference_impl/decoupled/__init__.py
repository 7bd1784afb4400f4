"""A small decoupled-attention language model (seed 001): model, config, checkpoint, runner.

``python -m reference_impl.decoupled --help`` runs it (generate, score, drift).
"""

from reference_impl.decoupled.config import DecoupledConfig
from reference_impl.decoupled.model import DecodeSession, DecoupledLM

__all__ = ["DecodeSession", "DecoupledConfig", "DecoupledLM"]
