"""The `flash_attn` names flash-attn 2.8's test suite imports, mapped onto flash_attn_cuda (test
use only: this directory is put on sys.path by tests/fa2_suite/conftest.py). flash-attn returns
(out, softmax_lse, S_dmask) when return_attn_probs=True; S_dmask only carries dropout (which
flash_attn_cuda does not implement), so it is None here."""
from __future__ import annotations

import flash_attn_cuda

__version__ = "2.8.3"


def _result(out_lse, return_attn_probs):
    out, lse = out_lse
    return (out, lse, None) if return_attn_probs else out


def _options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic):
    return (dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    opts = _options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic)
    return _result(flash_attn_cuda.attention(q, k, v, *opts, return_lse=True), return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                              alibi_slopes=None, deterministic=False, return_attn_probs=False):
    opts = _options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic)
    return _result(flash_attn_cuda.attention_qkvpacked(qkv, *opts, return_lse=True), return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                             alibi_slopes=None, deterministic=False, return_attn_probs=False):
    opts = _options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic)
    return _result(flash_attn_cuda.attention_kvpacked(q, kv, *opts, return_lse=True), return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    if block_table is not None:
        raise NotImplementedError("flash_attn_cuda: attention_varlen has no paged K/V (block_table)")
    opts = _options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic)
    return _result(flash_attn_cuda.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                    *opts, return_lse=True), return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    opts = _options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic)
    return _result(flash_attn_cuda.attention_varlen_qkvpacked(qkv, cu_seqlens, max_seqlen, *opts, return_lse=True),
                   return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    opts = _options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic)
    return _result(flash_attn_cuda.attention_varlen_kvpacked(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                                             max_seqlen_k, *opts, return_lse=True), return_attn_probs)


flash_attn_with_kvcache = flash_attn_cuda.attention_with_kvcache
