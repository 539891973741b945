"""Environment variables that change how training behaves, secrets hashed on this side."""

# ruff: noqa: UP006, UP035
from __future__ import annotations

from .redact import is_secret_name, redact_text, secret_digest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict

# Variables that change how a training run behaves, by prefix or exact name.
ENV_PREFIXES = (
    "CUDA_",
    "CUDNN_",
    "CUBLAS_",
    "NCCL_",
    "NVIDIA_",
    "NVTE_",
    "TORCH",
    "PYTORCH_",
    "TRITON_",
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS_",
    "HF_",
    "HUGGINGFACE_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
    "WANDB_",
    "ACCELERATE_",
    "DEEPSPEED_",
    "XLA_",
    "GLOO_",
    "HIP_",
    "HSA_",
    "ROCM_",
    "SGLANG_",
    "VLLM_",
    "FLASHINFER_",
    "UV_",
    "PIP_",
)
ENV_NAMES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV")


def capture_env(environ: Dict[str, str]) -> Dict[str, str]:
    """The variables above; a secret's value becomes a salted hash, URLs lose credentials."""
    out = {}
    for name, value in environ.items():
        if not (name.startswith(ENV_PREFIXES) or name in ENV_NAMES):
            continue
        out[name] = secret_digest(name, value) if is_secret_name(name) else redact_text(value)
    return out
