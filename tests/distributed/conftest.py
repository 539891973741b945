"""Fixtures of the gate's tests."""

from torchstack import torch_venvs

__all__ = ["torch_venvs"]
