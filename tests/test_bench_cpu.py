"""The benchmark CLI's GPU-free parts: FLOP formula, refusal without a GPU, tables from CSV."""
import pytest
import torch

from flash_attn_cuda import bench


def test_flops_formula():
    assert bench.attention_flops(2, 1024, 16, 128, causal=False) == 4 * 2 * 1024 ** 2 * 16 * 128
    assert bench.attention_flops(2, 1024, 16, 128, causal=True) == 2 * 2 * 1024 ** 2 * 16 * 128


def test_without_gpu_it_says_so_and_fails(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert bench.main(["--hdims", "64", "--seqlens", "512"]) != 0
    assert "no CUDA GPU" in capsys.readouterr().err


def test_unknown_impl_is_rejected():
    with pytest.raises(SystemExit):
        bench.parse_args(["--impls", "flash_attn_cuda,triton"])


def test_replot_table_from_csv(tmp_path):
    csv_path = tmp_path / "r.csv"
    csv_path.write_text(
        "impl,dtype,hdim,seqlen,causal,batch,nheads,fwd_ms,fwd_tflops\n"
        "flash_attn_cuda,bfloat16,128,4096,True,4,16,1.0,300.0\n"
        "sdpa_flash,bfloat16,128,4096,True,4,16,1.2,250.0\n"
        "sdpa_cudnn,bfloat16,128,4096,True,4,16,,\n"
    )
    md = tmp_path / "r.md"
    assert bench.main(["--replot", str(csv_path), "--md", str(md)]) == 0
    lines = md.read_text().splitlines()
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    row = [c.strip() for c in lines[4].strip("|").split("|")]
    cells = dict(zip(header, row))
    assert cells["hdim"] == "128" and cells["causal"] == "True" and cells["seqlen"] == "4096"
    assert cells["flash_attn_cuda"] == "300.0" and cells["sdpa_flash"] == "250.0"
    assert cells["ours/sdpa_flash"] == "1.20"
    assert cells["sdpa_cudnn"] == "n/a" and cells["ours/sdpa_cudnn"] == "n/a"
