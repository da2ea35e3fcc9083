"""Input validation and the fake (meta) implementation, on fake CUDA tensors: runs without a
GPU, exactly as torch.compile sees the op while tracing. Tests that reach the op (its fake impl,
autograd wiring, the raw op's checks) need the built extension; the validators alone do not."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import flash_attn_cuda
from flash_attn_cuda import _ops, attention
from flash_attn_cuda._validate import MAX_HEAD_DIM, SUPPORTED_DTYPES, check_attention_inputs

needs_extension = pytest.mark.extension
# A compiled head dim and dtype; without the extension (those tests skip), a default build's.
HDIM = (flash_attn_cuda.compiled_head_dims() or (64,))[0]
DTYPE = (flash_attn_cuda.compiled_dtypes() or (torch.bfloat16,))[0]
ALL_HEAD_DIMS = tuple(range(32, MAX_HEAD_DIM + 1, 32))


def t(*shape, dtype=DTYPE, device="cuda"):
    return torch.empty(*shape, dtype=dtype, device=device)


@needs_extension
def test_build_reports_what_it_compiled():
    assert set(flash_attn_cuda.compiled_head_dims()) <= {32, 64, 96, 128, 160, 192, 224, 256}
    assert len(flash_attn_cuda.compiled_head_dims()) >= 1
    assert set(flash_attn_cuda.compiled_dtypes()) <= {torch.float16, torch.bfloat16}


@needs_extension
def test_fake_op_shapes(fake):
    q, k, v = t(2, 100, 8, HDIM), t(2, 37, 2, HDIM), t(2, 37, 2, HDIM)
    out, lse = attention(q, k, v, causal=True, return_lse=True)
    assert out.shape == (2, 100, 8, HDIM) and out.dtype == DTYPE and out.device.type == "cuda"
    assert lse.shape == (2, 8, 100) and lse.dtype == torch.float32
    assert attention(q, k, v).shape == q.shape


@needs_extension
def test_strided_views_are_accepted(fake):
    q = t(2, 8, 100, HDIM).transpose(1, 2)  # (2, 100, 8, d) with head-major strides
    assert attention(q, q, q).shape == (2, 100, 8, HDIM)


BAD = [
    # (description, builder, exception, message fragment)
    ("cpu tensor", lambda: (t(1, 4, 2, HDIM, device="cpu"),) * 3, ValueError, "must be a CUDA tensor"),
    ("float32", lambda: (t(1, 4, 2, HDIM, dtype=torch.float32),) * 3, TypeError, "float16 or torch.bfloat16"),
    ("float64", lambda: (t(1, 4, 2, HDIM, dtype=torch.float64),) * 3, TypeError, "float16 or torch.bfloat16"),
    ("3-D", lambda: (t(4, 2, HDIM),) * 3, ValueError, "must be 4-D"),
    ("not a tensor", lambda: ([1, 2], t(1, 4, 2, HDIM), t(1, 4, 2, HDIM)), TypeError, "must be a torch.Tensor"),
    ("mixed dtypes", lambda: (t(1, 4, 2, HDIM), t(1, 4, 2, HDIM, dtype=torch.float16 if DTYPE == torch.bfloat16
                                                   else torch.bfloat16), t(1, 4, 2, HDIM)), TypeError, "share a dtype"),
    ("batch", lambda: (t(1, 4, 2, HDIM), t(2, 4, 2, HDIM), t(2, 4, 2, HDIM)), ValueError, "batch sizes differ"),
    ("kv seqlen", lambda: (t(1, 4, 2, HDIM), t(1, 5, 2, HDIM), t(1, 6, 2, HDIM)), ValueError, "same seqlen"),
    ("kv heads", lambda: (t(1, 4, 2, HDIM), t(1, 5, 2, HDIM), t(1, 5, 1, HDIM)), ValueError, "same number of heads"),
    ("heads ratio", lambda: (t(1, 4, 3, HDIM), t(1, 5, 2, HDIM), t(1, 5, 2, HDIM)), ValueError, "multiple of nheads"),
    ("head dims", lambda: (t(1, 4, 2, HDIM), t(1, 5, 2, HDIM + 8), t(1, 5, 2, HDIM + 8)), ValueError,
     "head dims differ"),
    ("d > 256", lambda: (t(1, 4, 2, 264),) * 3, ValueError, "<= 256"),
    ("d % 8 mixed", lambda: (t(1, 4, 2, 60), t(1, 4, 2, 64), t(1, 4, 2, 64)), ValueError, "head dims differ"),
    ("last dim strided", lambda: (t(1, 4, 2, 2 * HDIM)[..., ::2],) * 3, ValueError, "contiguous last dimension"),
    ("misaligned", lambda: (t(1, 4, 2, HDIM + 8)[..., 1:HDIM + 1],) * 3, ValueError, "16-byte aligned"),
    ("grid", lambda: (t(70000, 1, 1, HDIM),) * 3, ValueError, "<= 65535"),
]


def _validators(q, k, v):
    """What attention() checks q, k, v with, against a full build's head dims and dtypes."""
    check_attention_inputs(q, k, v, ALL_HEAD_DIMS, SUPPORTED_DTYPES, check_device=False)


@pytest.mark.parametrize("entry", [pytest.param(attention, marks=needs_extension), _validators],
                         ids=["attention", "validators"])
@pytest.mark.parametrize("desc,build,exc,msg", BAD, ids=[b[0] for b in BAD])
def test_bad_inputs_raise_one_clear_exception(fake, desc, build, exc, msg, entry):
    with pytest.raises(exc, match=msg):
        entry(*build())


def test_uncompiled_head_dim_and_dtype_are_reported(fake):
    q = t(1, 4, 2, 64)
    with pytest.raises(ValueError, match="FLASH_ATTN_CUDA_HDIMS"):
        check_attention_inputs(q, q, q, compiled_head_dims=(32,), compiled_dtypes=(DTYPE,), check_device=False)
    with pytest.raises(ValueError, match="FLASH_ATTN_CUDA_DTYPES"):
        check_attention_inputs(q, q, q, compiled_head_dims=(64,), compiled_dtypes=(), check_device=False)


def test_head_dim_rounds_up_to_next_compiled(fake):
    q = t(1, 4, 2, 72)
    assert check_attention_inputs(q, q, q, (64, 128, 256), (DTYPE,), check_device=False) == 128
    q = t(1, 4, 2, 64)
    assert check_attention_inputs(q, q, q, (64, 128, 256), (DTYPE,), check_device=False) == 64


@needs_extension
@pytest.mark.parametrize("scale", [0.0, -0.125, float("nan"), float("inf"), 1e-45, 1e39])
def test_bad_softmax_scale_raises(fake, scale):
    # The kernels take the row max of raw scores: a scale <= 0 or a non-normal float32 would
    # silently give NaN, so it is refused.
    q = t(1, 4, 2, HDIM)
    with pytest.raises(ValueError, match="softmax_scale"):
        attention(q, q, q, softmax_scale=scale)


@needs_extension
def test_softmax_scale_type_and_good_values(fake):
    q = t(1, 4, 2, HDIM)
    with pytest.raises(TypeError, match="softmax_scale"):
        attention(q, q, q, softmax_scale="0.1")
    for scale in (1e-3, 0.125, 1, 30.0):
        assert attention(q, q, q, softmax_scale=scale).shape == q.shape


@needs_extension
def test_seqlen_limit(fake):
    from flash_attn_cuda._validate import MAX_SEQLEN
    q = t(1, MAX_SEQLEN + 1, 1, HDIM)
    with pytest.raises(ValueError, match="sequence lengths"):
        attention(q, q, q)


@needs_extension
def test_backward_fake_shapes(fake):
    if not flash_attn_cuda._ops.HAS_BACKWARD:
        pytest.skip("built without FLASH_ATTN_CUDA_BACKWARD=1")
    q, k, v = t(2, 100, 8, HDIM), t(2, 37, 2, HDIM), t(2, 37, 2, HDIM)
    out, lse = attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = torch.ops.flash_attn_cuda.bwd(out, q, k, v, out, lse, 0.125, True)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert dq.dtype == dk.dtype == dv.dtype == DTYPE


class _OpRecorder(TorchDispatchMode):
    """The ops dispatched under it: calls[i] = (name, {argument: value}), defaults filled in (dispatch
    drops trailing arguments that equal their defaults)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        bound = {}
        for i, a in enumerate(func._schema.arguments):
            if i < len(args):
                bound[a.name] = args[i]
            elif a.name in kwargs:
                bound[a.name] = kwargs[a.name]
            elif a.has_default_value():
                bound[a.name] = a.default_value
        self.calls.append((str(func.overloadpacket), bound))
        return func(*args, **kwargs)


def _check_backward_wiring(out, inputs, bwd_op, options, dropout=False, alibi=None):
    """out's backward node (C++ autograd, csrc/binding_autograd.cpp; called directly: autograd's engine
    wants a real GPU for CUDA tensors, fake or not) calls bwd_op once with the forward's options (a dict
    of bwd_op's argument names), its rng_state exactly when there is dropout and its alibi_slopes, and
    gives gradients shaped like the inputs (backward builds); or raises NotImplementedError naming the
    build flag."""
    from flash_attn_cuda import _ops
    backward = lambda: out.grad_fn(torch.empty_like(out), None, None)  # d out, d lse, d rng_state
    if not _ops.HAS_BACKWARD:
        with pytest.raises(NotImplementedError, match="FLASH_ATTN_CUDA_BACKWARD"):
            backward()
        return
    with _OpRecorder() as recorder:
        grads = backward()
    calls = [bound for name, bound in recorder.calls if name == f"flash_attn_cuda.{bwd_op}"]
    assert len(calls) == 1, [name for name, _ in recorder.calls]
    bound = calls[0]
    assert {name: bound[name] for name in options} == options
    assert (bound["rng_state"] is not None) == dropout
    assert (bound["alibi_slopes"] is None) == (alibi is None)
    if alibi is not None:
        assert bound["alibi_slopes"].shape == alibi.shape
    grads, rest = grads[:len(inputs)], grads[len(inputs):]  # rest: cu_seqlens_q / _k (varlen): no gradient
    assert [g.shape for g in grads] == [t.shape for t in inputs]
    assert [g.dtype for g in grads] == [t.dtype for t in inputs]
    assert all(g is None for g in rest), rest


def _wiring_cases():
    """(kwargs of attention(), the bwd op's options they must arrive as): every option off its default;
    those that need the feature kernels only where this build has them."""
    cases = [(dict(softmax_scale=0.3, causal=True, deterministic=True),
              dict(softmax_scale=0.3, causal=True, deterministic=True, window_left=-1, window_right=0,
                   softcap=0.0, dropout_p=0.0))]
    if _ops.HAS_EXTENSION and _ops.HAS_FEATURES:
        cases.append((dict(dropout_p=0.25, softmax_scale=0.2, window_size=(7, 3), softcap=5.0,
                           alibi_slopes=torch.ones(4, device="cuda")),
                      dict(softmax_scale=0.2, causal=False, deterministic=False, window_left=7, window_right=3,
                           softcap=5.0, dropout_p=0.25)))
    return cases


@needs_extension
@pytest.mark.parametrize("case", range(2))
def test_autograd_wiring(fake, case):
    """out is differentiable, lse is not; the backward calls the bwd op with the forward's options
    (backward builds) or raises NotImplementedError naming the build flag."""
    cases = _wiring_cases()
    if case >= len(cases):
        pytest.skip("the options that need the feature kernels (this build: FLASH_ATTN_CUDA_FEATURES=0)")
    kwargs, options = cases[case]
    q = t(2, 50, 4, HDIM).requires_grad_(True)
    k = t(2, 40, 2, HDIM).requires_grad_(True)
    v = t(2, 40, 2, HDIM).requires_grad_(True)
    out, lse = attention(q, k, v, **kwargs, return_lse=True)
    assert out.requires_grad and out.grad_fn is not None
    assert not lse.requires_grad
    _check_backward_wiring(out, (q, k, v), "bwd", options, dropout=kwargs.get("dropout_p", 0) > 0,
                           alibi=kwargs.get("alibi_slopes"))


@needs_extension
@pytest.mark.parametrize("case", range(2))
def test_varlen_fake_shapes_and_autograd_wiring(fake, case):
    """attention_varlen on fake tensors: output/LSE shapes, and the backward calls bwd_varlen (backward
    builds) with the forward's options and max_seqlens, gradients shaped like the packed inputs."""
    from flash_attn_cuda import attention_varlen
    if not _ops.HAS_FEATURES:
        pytest.skip("attention_varlen needs the feature kernels (this build: FLASH_ATTN_CUDA_FEATURES=0)")
    kwargs, options = _wiring_cases()[case]
    q = t(150, 4, HDIM).requires_grad_(True)   # (total_q, nheads, d)
    k = t(90, 2, HDIM).requires_grad_(True)    # (total_k, nheads_k, d)
    v = t(90, 2, HDIM).requires_grad_(True)
    cu_q = torch.tensor([0, 100, 150], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 40, 90], dtype=torch.int32, device="cuda")
    out, lse = attention_varlen(q, k, v, cu_q, cu_k, 100, 50, **kwargs, return_lse=True)
    assert out.shape == q.shape and lse.shape == (4, 150) and lse.dtype == torch.float32
    assert out.requires_grad and not lse.requires_grad
    _check_backward_wiring(out, (q, k, v), "bwd_varlen", dict(options, max_seqlen_q=100, max_seqlen_k=50),
                           dropout=kwargs.get("dropout_p", 0) > 0, alibi=kwargs.get("alibi_slopes"))


@needs_extension
def test_feature_options_refused_without_feature_kernels(fake, monkeypatch):
    """A FLASH_ATTN_CUDA_FEATURES=0 build (simulated here unless this is one) refuses the options
    that need the feature kernels with one ValueError naming the flag, and runs the rest."""
    from flash_attn_cuda import attention_varlen
    monkeypatch.setattr(flash_attn_cuda, "HAS_FEATURES", False)
    q, k = t(2, 64, 4, HDIM), t(2, 48, 4, HDIM)
    for options in (dict(softcap=10.0), dict(window_size=(16, -1)), dict(window_size=(8, 0)),
                    dict(alibi_slopes=torch.ones(4, device="cuda"))):
        with pytest.raises(ValueError, match="FLASH_ATTN_CUDA_FEATURES=0"):
            attention(q, k, k, **options)
    cu = torch.tensor([0, 64], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="FLASH_ATTN_CUDA_FEATURES=0"):
        attention_varlen(q[0], q[0], q[0], cu, cu, 64, 64)
    # plain kernels: causal, a right edge only, a left edge that reaches every key
    for options in (dict(causal=True), dict(window_size=(-1, 5)), dict(window_size=(48, -1))):
        assert attention(q, k, k, **options).shape == q.shape


# flash-attn 2.x signatures (flash_attn_func, flash_attn_varlen_func): switching is an import change.
FLASH_ATTN_FUNC = ["q", "k", "v", "dropout_p", "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes",
                   "deterministic", "return_attn_probs"]
FLASH_ATTN_VARLEN_FUNC = FLASH_ATTN_FUNC[:3] + ["cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                                                "max_seqlen_k"] + FLASH_ATTN_FUNC[3:]


@needs_extension
def test_flash_attn_positional_order_and_unimplemented_args(fake):
    import inspect

    from flash_attn_cuda import attention_varlen
    for fn, names in ((attention, FLASH_ATTN_FUNC), (attention_varlen, FLASH_ATTN_VARLEN_FUNC)):
        params = inspect.signature(fn).parameters
        positional = [n for n, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD]
        assert positional == names
    q, k = t(2, 64, 4, HDIM), t(2, 48, 4, HDIM)
    out = attention(q, k, k, 0.0, 0.25, True)  # flash_attn_func(q, k, v, dropout_p, softmax_scale, causal)
    assert out.shape == q.shape
    for bad in (-0.1, 1.0, 1.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\)"):
            attention(q, k, k, bad)
    with pytest.raises(TypeError, match="dropout_p must be a float"):
        attention(q, k, k, "0.1")
    with pytest.raises(TypeError, match="return_attn_probs must be a bool"):
        attention(q, k, k, return_attn_probs=1)
    cu = torch.tensor([0, 64], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\)"):
        attention_varlen(q[0], q[0], q[0], cu, cu, 64, 64, -0.5)


def test_missing_extension_is_one_clear_error(monkeypatch):
    """Without flash_attn_cuda._C (simulated here unless this is a fresh clone) attention() and
    attention_varlen() raise one RuntimeError saying how to build it, with the import error."""
    from flash_attn_cuda import attention_varlen
    monkeypatch.setattr(_ops, "HAS_EXTENSION", False)
    monkeypatch.setattr(_ops, "_C_IMPORT_ERROR", ModuleNotFoundError("No module named 'flash_attn_cuda._C'"))
    q, cu = torch.empty(1, 4, 2, 64, dtype=torch.bfloat16), torch.tensor([0, 4], dtype=torch.int32)
    message = r"flash_attn_cuda._C is not built .*No module named 'flash_attn_cuda._C'.*make install"
    with pytest.raises(RuntimeError, match=message):
        attention(q, q, q)
    with pytest.raises(RuntimeError, match=message):
        attention_varlen(q[0], q[0], q[0], cu, cu, 4, 4)


@needs_extension
def test_raw_op_refuses_cpu_tensors_in_one_line():
    """The raw ops on CPU tensors: one short RuntimeError naming the op and the tensor, not the
    dispatcher's page about missing backends."""
    q, lse = torch.zeros(1, 4, 2, HDIM, dtype=DTYPE), torch.zeros(1, 2, 4)
    q3, cu = q[0], torch.tensor([0, 4], dtype=torch.int32)
    calls = [("fwd", "q", (q, q, q, 0.125, False)), ("fwd_varlen", "q", (q3, q3, q3, cu, cu, 4, 4, 0.125, False))]
    if _ops.HAS_BACKWARD:
        calls += [("bwd", "dout", (q, q, q, q, q, lse, 0.125, False)),
                  ("bwd_varlen", "dout", (q3, q3, q3, q3, q3, lse[0], cu, cu, 4, 4, 0.125, False))]
    if _ops.HAS_KVCACHE:
        calls += [("fwd_kvcache", "q", (q, q, q, None, None, None, None, None, None, None, None, 0.125, False, -1, -1,
                                        0.0, True, None, 0))]
    for name, tensor, args in calls:
        with pytest.raises(RuntimeError) as error:
            getattr(torch.ops.flash_attn_cuda, name)(*args)
        assert str(error.value).strip() == f"flash_attn_cuda::{name}: expected CUDA tensors, got {tensor} on cpu"
