"""First GPU check of the persistent sm90 forward (issue 11 v5), meant to run under `timeout 60`
before anything else: a hang costs one minute. Step 1 is exactly the autouse fixture of
tests/test_sm90_persistent_gpu.py (one CTA, q = k = v of shape (1, 256, 2, d) bf16: 4 tiles of 2 key
blocks on one CTA, the call that hung on 2026-12-02), then a few multi-tile shapes on 1 and 3 CTAs.
Every call is synchronised and printed (flushed) before the next, so a hang names its call. Each
persistent O / LSE must equal the base's bit for bit (the one-tile kernel where the build has it,
FLASH_ATTN_CUDA_SM90_PERSISTENT=both; else the persistent kernel with one CTA per SM), and the base's O
must pass FA2's rule against a float32 reference. Exit status 1 on any mismatch.
Usage: python3 scripts/sm90_persistent_smoke.py (in the repository root, extension built with the
persistent kernel: FLASH_ATTN_CUDA_SM90_PERSISTENT unset, 1 or both)."""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from fa2_checks import assert_fa2_close, poison  # noqa: E402
import flash_attn_cuda  # noqa: E402
from flash_attn_cuda import attention  # noqa: E402
from flash_attn_cuda.reference import attention_ref  # noqa: E402

KNOB = "FLASH_ATTN_CUDA_SM90_PERSISTENT_CTAS"
BASE = ["0"]  # the knob value of the kernel compared with (main() sets it)


def call(q, k, v, causal, ctas):
    poison(((q.shape[0], q.shape[1], q.shape[2], v.shape[3]), q.dtype), ((q.shape[0], q.shape[2], q.shape[1]), torch.float32))
    if ctas is None:
        os.environ.pop(KNOB, None)
    else:
        os.environ[KNOB] = ctas
    try:
        out, lse = attention(q, k, v, causal=causal, return_lse=True)
        torch.cuda.synchronize()
    finally:
        os.environ.pop(KNOB, None)
    family = flash_attn_cuda._ops.last_fwd_family()
    if family != "sm90":
        raise SystemExit(f"served by {family}, not sm90")
    return out, lse


def check(name, q, k, v, causal, ctas_list):
    t0 = time.time()
    ref_out, ref_lse = call(q, k, v, causal, BASE[0])
    assert_fa2_close(f"{name} base ({KNOB}={BASE[0]}) O", ref_out, attention_ref(q, k, v, causal)[0],
                     attention_ref(q, k, v, causal, compute_dtype=None)[0])
    bad = 0
    for ctas in ctas_list:
        print(f"  {name} causal={causal} ctas={ctas} ...", end=" ", flush=True)
        out, lse = call(q, k, v, causal, ctas)
        same_o, same_lse = torch.equal(out, ref_out), torch.equal(lse, ref_lse)
        diff = (out.float() - ref_out.float()).abs().nan_to_num(float("inf")).max().item()
        print(f"O {'==' if same_o else '!='} tile (max |diff| {diff:.3e}), LSE {'==' if same_lse else '!='} tile "
              f"[{time.time() - t0:.2f} s]", flush=True)
        bad += int(not (same_o and same_lse))
    return bad


def main():
    os.environ["FLASH_ATTN_CUDA_FAMILY"] = "sm90"
    hdims = [d for d in (64, 128, 256) if d in flash_attn_cuda._ops.sm90_head_dims()]
    print(f"sm90 head dims built: {hdims}", flush=True)
    if not hdims:
        raise SystemExit("no sm90 forward in this build")
    try:
        call(*(torch.randn(1, 128, 2, hdims[0], device="cuda", dtype=torch.bfloat16),) * 3, False, "0")
    except RuntimeError as e:
        if "left out" not in str(e):
            raise
        BASE[0] = "sms"
    print(f"base: {KNOB}={BASE[0]}", flush=True)
    bad = 0
    for d in hdims:
        torch.manual_seed(d)
        # 1. The fixture's call, verbatim: q = k = v, one CTA, 4 tiles of 2 key blocks.
        q = torch.randn(1, 256, 2, d, device="cuda", dtype=torch.bfloat16)
        print(f"d={d} fixture call (1 CTA, q = k = v (1, 256, 2, {d}))", flush=True)
        bad += check(f"d={d} fixture", q, q, q, False, ["1"])
        # 2. Many tiles per CTA, ragged last tile, 3 and 8 key blocks, GQA, causal.
        q = torch.randn(2, 1000, 4, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(2, 1000, 2, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(2, 1000, 2, d, device="cuda", dtype=torch.bfloat16)
        for causal in (False, True):
            bad += check(f"d={d} (2, 1000, 4/2)", q, k, v, causal, ["1", "3", "sms"])
        # 3. Causal seqlen_q > seqlen_k: tiles with no visible key between running ones.
        q = torch.randn(1, 1000, 2, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 255, 2, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, 255, 2, d, device="cuda", dtype=torch.bfloat16)
        bad += check(f"d={d} causal sq=1000 sk=255", q, k, v, True, ["1", "3"])
        # 4. An odd number of query tiles (3 of 128 rows, 2 of 192): a cluster kernel's last pair has a
        #    tile past seqlen_q (FLASH_ATTN_CUDA_SM90_FWD128_CLUSTER).
        q = torch.randn(2, 300, 2, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(2, 333, 2, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(2, 333, 2, d, device="cuda", dtype=torch.bfloat16)
        bad += check(f"d={d} sq=300 sk=333", q, k, v, False, ["1", "3", "sms"])
    print(f"smoke: {bad} mismatches", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
