"""Environment variables that change how training behaves, secrets hashed on this side."""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

from .reading import escaped_line
from .redact import is_secret_name, redact_text, secret_digest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional

# A value longer than this (a PYTHONPATH naming every folder a site loads) is kept as its
# length and a hash, which diff compares as well: the host takes at most 64 KiB of text a
# value, and would refuse the whole report for one longer.
VALUE_CAP = 16 << 10

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
ENV_NAMES = (
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "LD_AUDIT",  # loads its libraries into every process, as LD_PRELOAD does
    "PYTHONPATH",
    "PYTHONHOME",  # another standard library
    "PYTHONHASHSEED",
    "PYTHONOPTIMIZE",  # asserts stripped (and other bytecode: .opt-N.pyc)
    "PYTHONWARNINGS",  # "error": a warning raises
    "PYTHONPYCACHEPREFIX",  # bytecode loaded from another tree than __pycache__
    "VIRTUAL_ENV",
)


def capture_env(environ: Dict[str, str], warnings: Optional[List[str]] = None) -> Dict[str, str]:
    """The variables above; a secret's value becomes a salted hash, URLs lose credentials.
    A variable whose name is not one line of text (a control or bidi character) is left
    out, and said in ``warnings``: the host refuses such a name."""
    out = {}
    for name, value in environ.items():
        if not (name.startswith(ENV_PREFIXES) or name in ENV_NAMES):
            continue
        if escaped_line(name) != name:
            if warnings is not None:
                warnings.append(
                    "an environment variable named %s is not recorded: its name is not one "
                    "line of text" % ascii(name[:100])
                )
            continue
        if is_secret_name(name):
            out[name] = secret_digest(name, value)
        elif len(value) > VALUE_CAP:
            out[name] = _long(value)
        else:
            out[name] = redact_text(value)
    return out


def _long(value: str) -> str:
    """A value too long to keep, as its length and a hash of it."""
    import hashlib

    data = value.encode("utf-8", "surrogateescape")
    return "<%d characters, sha256 %s>" % (len(value), hashlib.sha256(data).hexdigest()[:16])
