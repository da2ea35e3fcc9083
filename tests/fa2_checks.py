"""FA2's accuracy rule, shared by the GPU tests: against a float32 reference, our max error is at
most twice the error of PyTorch computing the same thing in the low precision, plus 1e-4.
Gradients go through autograd on fresh leaves; outputs are poisoned (NaN-filled blocks freed just
before the call) so that elements a kernel never writes show up as NaN."""
import torch

import flash_attn_cuda

EPS = 1e-4


def poison(*shapes_dtypes):
    """Leave NaN in the caching allocator's free blocks of these (shape, dtype) sizes, two of each,
    where the next outputs land: elements a kernel does not write stay NaN instead of happening
    to be zero."""
    blocks = [torch.full(shape, float("nan"), dtype=dtype, device="cuda")
              for shape, dtype in shapes_dtypes for _ in range(2)]
    del blocks


def assert_fa2_close(name, ours, ref, lowp):
    """ours (low precision) vs ref (float32) with PyTorch's own low-precision result lowp as the bar."""
    assert ours.shape == ref.shape, f"{name}: shape {tuple(ours.shape)} != {tuple(ref.shape)}"
    assert not ours.isnan().any(), f"{name} has NaN (unwritten or wrong)"
    if ours.numel() == 0:
        return
    err = (ours.float() - ref).abs().max().item()
    err_pt = (lowp.float() - ref).abs().max().item()
    assert err <= 2 * err_pt + EPS, f"{name}: max error {err:.3e} > 2 x PyTorch's {err_pt:.3e} + {EPS}"


def assert_lse_close(lse, ref_lse, rtol=1e-4):
    """-inf exactly where the reference's row sees no key; elsewhere relative error <= rtol."""
    assert lse.shape == ref_lse.shape, f"lse shape {tuple(lse.shape)} != {tuple(ref_lse.shape)}"
    empty = ref_lse == float("-inf")
    assert torch.equal(lse == float("-inf"), empty), "LSE must be -inf exactly on rows with no visible key"
    if (~empty).any():
        err = ((lse[~empty] - ref_lse[~empty]).abs() / (1 + ref_lse[~empty].abs())).max().item()
        assert err <= rtol, f"LSE relative error {err:.3e} > {rtol}"


def grads(fn, inputs, dout):
    """d(fn(*inputs)) / d inputs for the output gradient dout, on fresh leaf copies."""
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    return torch.autograd.grad(fn(*leaves), leaves, dout)


def assert_grads_fa2_close(ours_fn, ref_fn, inputs, dout):
    """Gradients of ours_fn(*inputs) vs ref_fn(*inputs, compute_dtype) (float32, and None = the
    inputs' low precision), FA2's rule for each input; dout is in the inputs' dtype."""
    ours = grads(ours_fn, inputs, dout)
    ref = grads(lambda *a: ref_fn(*a, torch.float32), inputs, dout.float())
    lowp = grads(lambda *a: ref_fn(*a, None), inputs, dout)
    for i, (g, r, l) in enumerate(zip(ours, ref, lowp)):
        name = ("dq", "dk", "dv")[i] if i < 3 else f"d(input {i})"
        assert g.dtype == inputs[i].dtype, f"{name}: dtype {g.dtype} != {inputs[i].dtype}"
        assert_fa2_close(name, g, r, l)


def expected_families(family, q, k, headdim=None):
    """What may serve a plain forward call of q (batch, seqlen_q, nheads, d) and k when
    FLASH_ATTN_CUDA_FAMILY=family: sm80 -> {"sm80"}; sm90 -> {"sm90"} where the build has an sm90
    kernel of exactly this head dim, {"sm80"} where it has none (the fallback), either for head dims
    that run a larger kernel zero-padded (the sm90 kernel's own choice, fwd_supports). Decode-like
    shapes (seqlen_q x group <= 16, csrc/heuristics.h prefer_decode_kernel) may run on the KV-cache
    kernel instead ("decode"); calls with no work run none ("none")."""
    d = q.shape[-1] if headdim is None else headdim
    if q.numel() == 0 or k.shape[1] == 0:
        return {"none"}
    if family == "sm80":
        served = {"sm80"}
    else:
        rounded = min((h for h in flash_attn_cuda.compiled_head_dims() if h >= d), default=None)
        sm90 = rounded in flash_attn_cuda._ops.sm90_head_dims()
        served = {"sm90"} if sm90 and rounded == d else {"sm80", "sm90"} if sm90 else {"sm80"}
    if q.shape[1] * (q.shape[2] // k.shape[2]) <= 16 and flash_attn_cuda._ops.HAS_KVCACHE:
        served |= {"decode"}
    return served


def assert_served(family, q, k):
    """The last forward call (this thread) ran on a family expected_families allows."""
    served = flash_attn_cuda._ops.last_fwd_family()
    allowed = expected_families(family, q, k)
    assert served in allowed, (f"FLASH_ATTN_CUDA_FAMILY={family}: the forward of q {tuple(q.shape)}, "
                               f"k {tuple(k.shape)} ran on {served!r}, expected {sorted(allowed)}")
