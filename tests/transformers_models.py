"""Tiny randomly initialised transformers models for the backend tests (no downloads): Llama (GQA),
Mistral (GQA, sliding window), Gemma-2 (softcap, sliding window), and left-padded batches."""
import torch

CONFIGS = {
    "llama": ("LlamaConfig", dict(num_key_value_heads=2)),
    "mistral": ("MistralConfig", dict(num_key_value_heads=2, sliding_window=8)),
    "gemma2": ("Gemma2Config", dict(num_key_value_heads=2, sliding_window=8, attn_logit_softcapping=5.0,
                                    final_logit_softcapping=None, query_pre_attn_scalar=16)),
}


def make_model(kind: str, attn: str, head_dim: int = 16, device="cpu", dtype=torch.bfloat16, seed=0):
    import transformers
    name, extra = CONFIGS[kind]
    cfg = getattr(transformers, name)(vocab_size=128, hidden_size=4 * head_dim, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4, head_dim=head_dim,
                                      max_position_embeddings=256, **extra)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=torch.float32)
    return model.to(device=device, dtype=dtype).eval()


def padded_batch(lengths, seqlen, device="cpu", seed=1):
    """input_ids (batch, seqlen) and a left-padding attention_mask (1 = token)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 128, (len(lengths), seqlen), generator=g)
    mask = torch.zeros(len(lengths), seqlen, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, seqlen - n:] = 1
    return ids.to(device), mask.to(device)
