"""The pieces that run flash-attn's test suite against this package (tests/fa2_suite), on the CPU:
the einops stand-in, the bert_padding helpers, the case filter and sample, and that the alias
names take flash-attn's arguments."""
import importlib
import inspect
import pathlib
import sys
import types

import pytest
import torch

SUITE_DIR = pathlib.Path(__file__).resolve().parent / "fa2_suite"
sys.path.insert(0, str(SUITE_DIR))
fallback = importlib.import_module("_einops_fallback")
bert_padding = importlib.import_module("flash_attn.bert_padding")
alias = importlib.import_module("flash_attn")
sys.path.remove(str(SUITE_DIR))


def test_einops_fallback_patterns():
    x = torch.randn(2, 3, 4, 5)
    r, p = fallback.rearrange, fallback.repeat
    assert torch.equal(r(x, "b s h d -> (b s) h d"), x.reshape(6, 4, 5))
    assert torch.equal(r(x.reshape(6, 4, 5), "(b s) h d -> b s h d", b=2), x)
    assert torch.equal(r(x, "b s ... -> s b ..."), x.transpose(0, 1))
    assert torch.equal(r(x, "b s h d -> b 1 (s h) d"), x.reshape(2, 1, 12, 5))
    assert torch.equal(r(x[:, :, 0, 0], "b s -> b 1 s 1"), x[:, :, 0, 0][:, None, :, None])
    assert torch.equal(r(torch.arange(3), "s -> s 1"), torch.arange(3)[:, None])
    assert torch.equal(p(x, "b s h d -> b s (h g) d", g=3), x.repeat_interleave(3, dim=2))
    kv = torch.randn(2, 3, 2, 4, 5)
    assert torch.equal(p(kv, "b s two h d -> b s two (h g) d", g=2), kv.repeat_interleave(2, dim=3))
    assert torch.equal(p(torch.arange(4), "s -> b s", b=3), torch.arange(4).expand(3, 4))
    m = torch.randn(2, 3)
    assert torch.equal(p(m, "s_16 s_256 -> (s_16 16) (s_256 256)"),
                       m.repeat_interleave(16, 0).repeat_interleave(256, 1))
    with pytest.raises(ValueError, match="not on the left"):
        r(x, "b s h d -> b s h d e")


def test_unpad_and_pad_round_trip():
    x = torch.randn(3, 5, 2, 4, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    packed, indices, cu, max_seqlen, used = bert_padding.unpad_input(x, mask)
    assert packed.shape == (8, 2, 4) and cu.tolist() == [0, 3, 8, 8] and cu.dtype == torch.int32
    assert max_seqlen == 5 and used.tolist() == [3, 5, 0]
    assert torch.equal(packed, x.detach()[mask])
    back = bert_padding.pad_input(packed, indices, 3, 5)
    assert torch.equal(back, x.detach() * mask[..., None, None])
    back.sum().backward()
    assert torch.equal(x.grad, mask[..., None, None].expand_as(x).float())


@pytest.mark.parametrize("name", ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
                                  "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
                                  "flash_attn_varlen_kvpacked_func"])
def test_alias_signatures_match_the_package(name):
    """The alias takes flash-attn's positional arguments; those after the tensors are
    flash_attn_cuda's own (same names, same order)."""
    import flash_attn_cuda
    target = {"flash_attn_func": "attention", "flash_attn_varlen_func": "attention_varlen"}.get(
        name, name.replace("flash_attn_", "attention_").replace("_func", ""))
    ours = [n for n, p in inspect.signature(getattr(flash_attn_cuda, target)).parameters.items()
            if p.kind == p.POSITIONAL_OR_KEYWORD]
    theirs = list(inspect.signature(getattr(alias, name)).parameters)
    assert theirs[:len(ours)] == ours
    assert theirs[len(ours):] in ([], ["block_table"])


def _suite_conftest():
    spec = importlib.util.spec_from_file_location("fa2_suite_conftest", SUITE_DIR / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_case_filter_names_each_reason(monkeypatch):
    conf = _suite_conftest()
    import flash_attn_cuda
    monkeypatch.setattr(flash_attn_cuda, "compiled_head_dims", lambda: (64, 128))
    monkeypatch.setattr(flash_attn_cuda, "compiled_dtypes", lambda: (torch.bfloat16,))
    bf16 = dict(dtype=torch.bfloat16)
    assert conf.skip_reason("test_flash_attn_output", dict(d=59, dropout_p=0.0, **bf16)) == ""
    assert "dropout" in conf.skip_reason("test_flash_attn_output", dict(d=64, dropout_p=0.17, **bf16))
    assert "block_table" in conf.skip_reason("test_flash_attn_varlen_causal", dict(d=64, paged_kv_block_size=256,
                                                                                     **bf16))
    assert conf.skip_reason("test_flash_attn_varlen_causal", dict(d=64, paged_kv_block_size=None, **bf16)) == ""
    assert "written in place" in conf.skip_reason("test_flash_attn_kvcache", dict(d=59, **bf16))
    assert "above this build" in conf.skip_reason("test_flash_attn_output", dict(d=160, **bf16))
    assert "not compiled" in conf.skip_reason("test_flash_attn_output", dict(d=64, dtype=torch.float16))


def test_sample_is_fixed_and_spread_in_proportion():
    conf = _suite_conftest()
    first, again = conf._sample(300, 1000, 40, 0, "test_a"), conf._sample(300, 1000, 40, 0, "test_a")
    assert first == again and len(first) == 12 and len(set(first)) == 12 and max(first) < 300
    assert conf._sample(300, 1000, 40, 1, "test_a") != first          # another seed, another sample
    assert len(conf._sample(3, 100000, 40, 0, "test_b")) == 2           # at least 2 of every function
    assert conf._sample(1, 100000, 40, 0, "test_c") == [0]


def test_plan_enumerates_the_marks_and_filters(monkeypatch):
    conf = _suite_conftest()
    import flash_attn_cuda
    monkeypatch.setattr(flash_attn_cuda, "compiled_head_dims", lambda: (64,))
    monkeypatch.setattr(flash_attn_cuda, "compiled_dtypes", lambda: (torch.bfloat16,))

    @pytest.mark.parametrize("dropout_p", [0.0, 0.17])
    @pytest.mark.parametrize("seqlen_q,seqlen_k", [(1, 2), (3, 4)])
    @pytest.mark.parametrize("d", [59, 128])
    def test_x(d, seqlen_q, seqlen_k, dropout_p):
        pass

    plan = conf._plan(types.SimpleNamespace(test_x=test_x, helper=len))
    names, runnable, reasons = plan["test_x"]
    assert sorted(names) == ["d", "dropout_p", "seqlen_k", "seqlen_q"]
    cases = [dict(zip(names, c)) for c in runnable]
    assert len(cases) == 2 and all(c["d"] == 59 and c["dropout_p"] == 0.0 for c in cases)
    assert {(c["seqlen_q"], c["seqlen_k"]) for c in cases} == {(1, 2), (3, 4)}
    assert conf._TOTALS["all"] == 8 and conf._TOTALS["runnable"] == 2
    assert sum(conf._EXCLUDED.values()) == 6 and sum(n for r, n in reasons.items() if r.startswith("dropout cases")) == 4
