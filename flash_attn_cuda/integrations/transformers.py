"""flash_attn_cuda as a Hugging Face transformers attention backend (transformers is optional).

    import flash_attn_cuda.integrations.transformers as fac_hf
    fac_hf.register()                      # once; then:
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="fa_cuda")

The name is "fa_cuda", not "flash_attn_cuda": transformers (5.x) treats every implementation
whose name contains "flash" as a flash-attn package or hub kernel and tries to import one at
model init. register() adds "fa_cuda" to transformers' AttentionInterface, with flash-attn's mask
function in its AttentionMaskInterface, so models get no N x N mask: a 2-D padding mask (or None)
reaches attention(), which runs
- no mask: attention() on (batch, seqlen, heads, d) views of the model's (batch, heads, seqlen, d)
  tensors (GQA without copies: fewer K/V heads go straight to the kernels);
- a padding mask: the real tokens gathered into the varlen layout (attention_varlen), so no
  attention is spent on pad tokens, and the output scattered back with zeros at the pads;
- packed sequences (transformers' cu_seq_lens_q/k keywords, batch 1): attention_varlen directly.
sliding_window (Mistral, Gemma-2) maps to window_size=(sliding_window - 1, sliding_window - 1) as
transformers' flash-attn path does (the causal mask keeps the right side at 0), softcap (Gemma-2)
to softcap, the layer's attention dropout (only while module.training) to dropout_p. What it
cannot serve raises one ValueError naming it: attention sinks (s_aux), float32 activations, value
head dims larger than the query's.
"""
from __future__ import annotations

import weakref
from typing import Optional

import torch
import torch.nn.functional as F

NAME = "fa_cuda"  # no "flash" in it: see the module docstring


def _unsupported(what: str) -> ValueError:
    return ValueError(f"flash_attn_cuda transformers backend: {what} is not supported; use "
                      f"attn_implementation='sdpa' or 'eager' for this model")


class _Unpadding:
    """Gather/scatter plan of one 2-D padding mask (batch, kv_len), shared by the layers of one
    forward: the mask tensor is the same object for all of them, so the device-to-host read of
    the longest sequence happens once per step. Keyed by the tensor (weak) and its version."""

    def __init__(self) -> None:
        self._key = None
        self._plan = None

    def plan(self, mask: torch.Tensor, q_len: int):
        key = (weakref.ref(mask), mask._version if not mask.is_inference() else None, q_len)
        if self._key is not None and self._key[0]() is mask and self._key[1:] == key[1:] and key[1] is not None:
            return self._plan
        mask = mask.bool()
        q_mask = mask[:, -q_len:]                                   # the queries are the last q_len positions
        lens_k, lens_q = mask.sum(-1, dtype=torch.int32), q_mask.sum(-1, dtype=torch.int32)
        cu_k = F.pad(lens_k.cumsum(0, dtype=torch.int32), (1, 0))
        cu_q = F.pad(lens_q.cumsum(0, dtype=torch.int32), (1, 0))
        max_q, max_k = (int(x) for x in torch.stack((lens_q.max(), lens_k.max())).tolist())
        plan = (q_mask.flatten().nonzero().flatten(), mask.flatten().nonzero().flatten(), cu_q, cu_k, max_q, max_k)
        self._key, self._plan = key, plan
        return plan


_unpadding = _Unpadding()


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: Optional[torch.Tensor], dropout: float = 0.0, scaling: Optional[float] = None,
                      sliding_window: Optional[int] = None, softcap: Optional[float] = None,
                      is_causal: Optional[bool] = None, s_aux: Optional[torch.Tensor] = None, **kwargs):
    """transformers' attention-function signature: query (batch, heads, q_len, d), key/value
    (batch, kv_heads, kv_len, d); returns (output (batch, q_len, heads, d), None)."""
    import flash_attn_cuda
    if s_aux is not None:
        raise _unsupported("attention sinks (s_aux)")
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise _unsupported(f"{query.dtype} activations (load the model in bfloat16 or float16)")
    d, dv = query.shape[-1], value.shape[-1]
    if dv > d:
        raise _unsupported(f"a value head dim ({dv}) larger than the query's ({d})")
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)   # (batch, len, heads, d) views
    if dv < d:                                                                    # MLA-style: pad v, crop out
        v = F.pad(v, (0, d - dv))
    causal = bool(module.is_causal if is_causal is None else is_causal)
    window = (-1, -1) if sliding_window is None else (sliding_window - 1, sliding_window - 1)
    options = dict(dropout_p=float(dropout) if module.training else 0.0, softmax_scale=scaling, causal=causal,
                   window_size=window, softcap=softcap or 0.0)
    batch, q_len = q.shape[0], q.shape[1]
    if kwargs.get("cu_seq_lens_q") is not None and attention_mask is None:   # packed sequences, batch 1
        out = flash_attn_cuda.attention_varlen(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), kwargs["cu_seq_lens_q"],
                                               kwargs["cu_seq_lens_k"], int(kwargs["max_length_q"]),
                                               int(kwargs["max_length_k"]), **options).view(q.shape)
    elif attention_mask is None:
        out = flash_attn_cuda.attention(q, k, v, **options)
    else:
        if attention_mask.dim() != 2:
            raise _unsupported(f"a {attention_mask.dim()}-D attention mask (expected the 2-D padding mask)")
        idx_q, idx_k, cu_q, cu_k, max_q, max_k = _unpadding.plan(attention_mask, q_len)
        out_packed = flash_attn_cuda.attention_varlen(q.flatten(0, 1)[idx_q], k.flatten(0, 1)[idx_k],
                                                      v.flatten(0, 1)[idx_k], cu_q, cu_k, max_q, max_k, **options)
        out = out_packed.new_zeros((batch * q_len,) + tuple(out_packed.shape[1:]))
        out = out.index_put((idx_q,), out_packed).view(batch, q_len, *out_packed.shape[1:])
    return (out[..., :dv] if dv < d else out), None


def register() -> None:
    """Adds NAME to transformers' AttentionInterface and AttentionMaskInterface (imports transformers)."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask
    except ImportError as e:
        raise ImportError("flash_attn_cuda.integrations.transformers needs transformers (pip install "
                          "'flash_attn_cuda[transformers]')") from e
    AttentionInterface.register(NAME, attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, flash_attention_mask)
