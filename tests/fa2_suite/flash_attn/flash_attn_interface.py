"""flash_attn.flash_attn_interface names the suite imports: the entry points, and
_get_block_size_n, which it uses only to decode dropout masks (dropout cases are skipped)."""
from . import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
               flash_attn_varlen_func, flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func,
               flash_attn_with_kvcache)

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache",
           "_get_block_size_n"]


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    raise NotImplementedError("flash_attn_cuda has no attention dropout: no dropout mask to decode")
