// Autograd of ops fwd and fwd_varlen, in C++ (their Autograd dispatch key): the forward saves what
// the backward needs, the backward calls op bwd / bwd_varlen through the dispatcher, so that
// torch.compile traces both through the ops' fake impls (flash_attn_cuda/_ops.py).
// Why C++ (H200 host, scripts/host_overhead.py, benchmarks/NOTES.md "Thirteenth session"): with
// torch.library.register_autograd's Python wrapper (fill_defaults, an autograd.Function, a Python
// redispatch, the backward under the GIL on autograd's thread) a fwd+bwd took 431 us of host time
// against cuDNN's 180 and a short training step waited on the host; here 177 us (cuDNN 153, same run).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <tuple>

namespace flash_binding {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Tensors3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using OptTensor = std::optional<at::Tensor>;

// The ops as the dispatcher has them (schemas in binding.cpp's TORCH_LIBRARY).
using FwdSig = Tensors3(const at::Tensor&, const at::Tensor&, const at::Tensor&, double, bool, bool, int64_t,
                        int64_t, double, const OptTensor&, double);
using FwdVarlenSig = Tensors3(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&, int64_t, int64_t, double, bool, bool, int64_t, int64_t, double,
                              const OptTensor&, double);

template <class Sig>
c10::TypedOperatorHandle<Sig> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

// The options after softmax_scale that fwd and fwd_varlen share, kept for the backward.
struct SavedOptions {
  double softmax_scale;
  bool causal, deterministic;
  int64_t window_left, window_right;
  double softcap, dropout_p;

  void save(AutogradContext* ctx) const {
    ctx->saved_data["scale"] = softmax_scale;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["det"] = deterministic;
    ctx->saved_data["wl"] = window_left;
    ctx->saved_data["wr"] = window_right;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["dropout"] = dropout_p;
  }
  static SavedOptions load(AutogradContext* ctx) {
    auto& d = ctx->saved_data;
    return {d["scale"].toDouble(), d["causal"].toBool(), d["det"].toBool(), d["wl"].toInt(), d["wr"].toInt(),
            d["softcap"].toDouble(), d["dropout"].toDouble()};
  }
};

// out, lse, rng_state of a forward: lse and rng_state get no gradient; an unused out gets none
// either (no zero-filled gradients materialised for them).
variable_list finish_forward(AutogradContext* ctx, const Tensors3& result) {
  const auto& [out, lse, rng_state] = result;
  ctx->mark_non_differentiable({lse, rng_state});
  ctx->set_materialize_grads(false);
  return {out, lse, rng_state};
}

#ifdef FLASH_ATTN_CUDA_BACKWARD
// The bwd ops' alibi_slopes argument from the saved tensor (undefined = none).
OptTensor optional_of(const at::Tensor& t) { return t.defined() ? OptTensor(t) : std::nullopt; }
#else
[[noreturn]] void refuse_backward() {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "flash_attn_cuda: this build has no backward pass (it was built with "
                              "FLASH_ATTN_CUDA_BACKWARD=0); rebuild without that flag to train with it");
}
#endif

// fwd(q, k, v, softmax_scale, causal, deterministic, window_left, window_right, softcap, alibi_slopes,
// dropout_p) -> (out, lse, rng_state); saved: q, k, v, out, lse, rng_state, alibi_slopes.
struct FwdFunction : torch::autograd::Function<FwdFunction> {
  static constexpr int kArgs = 11;  // gradients the backward returns: one per forward argument

  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, double softmax_scale, bool causal, bool deterministic,
                               int64_t window_left, int64_t window_right, double softcap,
                               const OptTensor& alibi_slopes, double dropout_p) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static const auto op = op_handle<FwdSig>("flash_attn_cuda::fwd");
    const Tensors3 result = op.call(q, k, v, softmax_scale, causal, deterministic, window_left, window_right,
                                    softcap, alibi_slopes, dropout_p);
#ifdef FLASH_ATTN_CUDA_BACKWARD  // a forward-only build keeps nothing alive for a backward that can only refuse
    const auto& [out, lse, rng_state] = result;
    ctx->save_for_backward({q, k, v, out, lse, rng_state, alibi_slopes.value_or(at::Tensor())});
    SavedOptions{softmax_scale, causal, deterministic, window_left, window_right, softcap, dropout_p}.save(ctx);
#endif
    return finish_forward(ctx, result);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list result(kArgs);
    if (!grads[0].defined()) { return result; }  // out unused: no gradient
#ifdef FLASH_ATTN_CUDA_BACKWARD
    using BwdSig = Tensors3(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&, double, bool, bool, int64_t, int64_t, double,
                            const OptTensor&, double, const OptTensor&);
    static const auto op = op_handle<BwdSig>("flash_attn_cuda::bwd");
    const variable_list s = ctx->get_saved_variables();  // q, k, v, out, lse, rng_state, alibi_slopes
    const SavedOptions o = SavedOptions::load(ctx);
    auto [dq, dk, dv] = op.call(grads[0].contiguous(), s[0], s[1], s[2], s[3], s[4], o.softmax_scale, o.causal,
                                o.deterministic, o.window_left, o.window_right, o.softcap, optional_of(s[6]),
                                o.dropout_p, o.dropout_p > 0 ? OptTensor(s[5]) : std::nullopt);
    result[0] = dq, result[1] = dk, result[2] = dv;
    return result;
#else
    refuse_backward();
#endif
  }
};

// fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, then fwd's options);
// saved: q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, rng_state, alibi_slopes.
struct FwdVarlenFunction : torch::autograd::Function<FwdVarlenFunction> {
  static constexpr int kArgs = 15;

  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const at::Tensor& cu_seqlens_q,
                               const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                               double softmax_scale, bool causal, bool deterministic, int64_t window_left,
                               int64_t window_right, double softcap, const OptTensor& alibi_slopes,
                               double dropout_p) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static const auto op = op_handle<FwdVarlenSig>("flash_attn_cuda::fwd_varlen");
    const Tensors3 result = op.call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                                    causal, deterministic, window_left, window_right, softcap, alibi_slopes,
                                    dropout_p);
#ifdef FLASH_ATTN_CUDA_BACKWARD
    const auto& [out, lse, rng_state] = result;
    ctx->save_for_backward({q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, rng_state,
                            alibi_slopes.value_or(at::Tensor())});
    ctx->saved_data["max_q"] = max_seqlen_q;
    ctx->saved_data["max_k"] = max_seqlen_k;
    SavedOptions{softmax_scale, causal, deterministic, window_left, window_right, softcap, dropout_p}.save(ctx);
#endif
    return finish_forward(ctx, result);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list result(kArgs);
    if (!grads[0].defined()) { return result; }
#ifdef FLASH_ATTN_CUDA_BACKWARD
    using BwdSig = Tensors3(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                            int64_t, double, bool, bool, int64_t, int64_t, double, const OptTensor&, double,
                            const OptTensor&);
    static const auto op = op_handle<BwdSig>("flash_attn_cuda::bwd_varlen");
    // q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, rng_state, alibi_slopes
    const variable_list s = ctx->get_saved_variables();
    const SavedOptions o = SavedOptions::load(ctx);
    auto [dq, dk, dv] = op.call(grads[0].contiguous(), s[0], s[1], s[2], s[3], s[4], s[5], s[6],
                                ctx->saved_data["max_q"].toInt(), ctx->saved_data["max_k"].toInt(),
                                o.softmax_scale, o.causal, o.deterministic, o.window_left, o.window_right,
                                o.softcap, optional_of(s[8]), o.dropout_p,
                                o.dropout_p > 0 ? OptTensor(s[7]) : std::nullopt);
    result[0] = dq, result[1] = dk, result[2] = dv;
    return result;
#else
    refuse_backward();
#endif
  }
};

Tensors3 to_tuple(const variable_list& v) { return {v[0], v[1], v[2]}; }

Tensors3 fwd_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double softmax_scale,
                      bool causal, bool deterministic, int64_t window_left, int64_t window_right, double softcap,
                      const OptTensor& alibi_slopes, double dropout_p) {
  return to_tuple(FwdFunction::apply(q, k, v, softmax_scale, causal, deterministic, window_left, window_right,
                                     softcap, alibi_slopes, dropout_p));
}

Tensors3 fwd_varlen_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                             int64_t max_seqlen_k, double softmax_scale, bool causal, bool deterministic,
                             int64_t window_left, int64_t window_right, double softcap,
                             const OptTensor& alibi_slopes, double dropout_p) {
  return to_tuple(FwdVarlenFunction::apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                           softmax_scale, causal, deterministic, window_left, window_right,
                                           softcap, alibi_slopes, dropout_p));
}

}  // namespace
}  // namespace flash_binding

TORCH_LIBRARY_IMPL(flash_attn_cuda, Autograd, m) {
  m.impl("fwd", &flash_binding::fwd_autograd);
  m.impl("fwd_varlen", &flash_binding::fwd_varlen_autograd);
}
