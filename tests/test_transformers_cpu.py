"""The transformers backend (flash_attn_cuda.integrations.transformers) on the CPU, with the kernels
replaced by the float32 reference (flash_attn_cuda.reference): registration, and tiny Llama /
Mistral / Gemma-2 models whose logits on left-padded batches match the same model in "eager" mode
(padding -> varlen, GQA, sliding window, softcap). Skips without transformers (optional)."""
import pytest
import torch

transformers = pytest.importorskip("transformers")

import flash_attn_cuda  # noqa: E402
from flash_attn_cuda.integrations import transformers as backend  # noqa: E402
from flash_attn_cuda.reference import attention_ref, attention_varlen_ref  # noqa: E402
from transformers_models import make_model, padded_batch  # noqa: E402


def _ref_attention(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, **kw):
    return attention_ref(q, k, v, causal, softmax_scale, window_size=window_size, softcap=softcap)[0].to(q.dtype)


def _ref_varlen(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p=0.0, softmax_scale=None, causal=False,
                window_size=(-1, -1), softcap=0.0, **kw):
    assert max_q == int((cu_q[1:] - cu_q[:-1]).max()) and max_k == int((cu_k[1:] - cu_k[:-1]).max())
    return attention_varlen_ref(q, k, v, cu_q, cu_k, causal, softmax_scale, window_size=window_size,
                                softcap=softcap)[0].to(q.dtype)


@pytest.fixture
def stand_in_kernels(monkeypatch):
    calls = []
    monkeypatch.setattr(flash_attn_cuda, "attention", lambda *a, **k: calls.append("dense") or _ref_attention(*a, **k))
    monkeypatch.setattr(flash_attn_cuda, "attention_varlen",
                        lambda *a, **k: calls.append("varlen") or _ref_varlen(*a, **k))
    backend.register()
    return calls


def test_register_adds_the_name():
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    backend.register()
    assert AttentionInterface._global_mapping[backend.NAME] is backend.attention_forward
    assert backend.NAME in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping


@pytest.mark.parametrize("kind", ["llama", "mistral", "gemma2"])
def test_padded_batch_logits_match_eager(stand_in_kernels, kind):
    ids, mask = padded_batch([20, 13, 5], 20)
    ours = make_model(kind, backend.NAME)
    eager = make_model(kind, "eager")
    with torch.no_grad():
        got = ours(input_ids=ids, attention_mask=mask).logits.float()
        want = eager(input_ids=ids, attention_mask=mask).logits.float()
    real = mask.bool()
    err = (got - want)[real].abs().max().item()
    assert err < 0.1, f"{kind}: max logit difference {err} on real tokens"
    assert "varlen" in stand_in_kernels                          # the padding mask went to the varlen path
    stand_in_kernels.clear()
    with torch.no_grad():
        full = ours(input_ids=ids[:1]).logits.float()
    assert stand_in_kernels and set(stand_in_kernels) == {"dense"}   # no mask: the dense path, no N x N mask
    assert (full - eager(input_ids=ids[:1]).logits.float()).abs().max().item() < 0.1


def test_greedy_generate_matches_eager(stand_in_kernels):
    ids, mask = padded_batch([12, 7], 12, seed=3)
    ours, eager = make_model("llama", backend.NAME), make_model("llama", "eager")
    kwargs = dict(max_new_tokens=6, do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    a = ours.generate(input_ids=ids, attention_mask=mask, **kwargs)
    b = eager.generate(input_ids=ids, attention_mask=mask, **kwargs)
    for step, (la, lb) in enumerate(zip(a.logits, b.logits)):
        assert (la.float() - lb.float()).abs().max().item() < 0.1, f"step {step}"


def test_unservable_cases_are_one_clear_error(stand_in_kernels):
    model = make_model("llama", backend.NAME)
    attn = model.model.layers[0].self_attn
    q = torch.randn(1, 4, 8, 16, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 8, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="float32 activations"):
        backend.attention_forward(attn, q.float(), k.float(), k.float(), None)
    attn.eval()
    with pytest.raises(ValueError, match="attention sinks"):
        backend.attention_forward(attn, q, k, k, None, s_aux=torch.zeros(4))
    with pytest.raises(ValueError, match="4-D attention mask"):
        backend.attention_forward(attn, q, k, k, torch.ones(1, 1, 8, 8, dtype=torch.bool))


def test_attention_dropout_only_in_training(monkeypatch):
    """The layer's attention dropout reaches attention() as dropout_p while training, 0 in eval."""
    seen = []
    monkeypatch.setattr(flash_attn_cuda, "attention", lambda *a, dropout_p=0.0, **kw: seen.append(dropout_p) or a[0])
    model = make_model("llama", backend.NAME)
    attn = model.model.layers[0].self_attn
    q = torch.randn(1, 4, 8, 16, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 8, 16, dtype=torch.bfloat16)
    attn.train()
    backend.attention_forward(attn, q, k, k, None, dropout=0.1)
    attn.eval()
    backend.attention_forward(attn, q, k, k, None, dropout=0.1)
    assert seen == [0.1, 0.0]
