// Torch-side helpers shared by the binding files (binding.cpp defines them; binding_kvcache.cpp
// uses them): input checks, option handling, tensor strides, launch errors.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

#include "flash_api.h"

namespace flash_binding {

// Numbers for error messages (snprintf; see binding.cpp for why not an ostream).
std::string num(double x);
std::string num(int64_t x);

// ndim 4: (batch, seqlen, nheads, headdim); ndim 3: packed varlen (total_tokens, nheads, headdim).
// CUDA, fp16/bf16, contiguous last dim, 16-byte aligned rows.
void check_input(const at::Tensor& t, const char* name, int64_t ndim = 4);

// Attention options every op takes after softmax_scale.
struct Options {
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  double softcap = 0.0;
  const std::optional<at::Tensor>* alibi_slopes = nullptr;
  double dropout_p = 0.0;  // the forward/backward ops only (the KV-cache op has none)
};

// Checks scale, softcap, window sides and ALiBi slopes before anything is allocated; returns the
// compiled head dim the call runs.
int check_options(const at::Tensor& q, int64_t batch, int64_t nheads, int64_t headdim, double softmax_scale,
                  const Options& opt);

// Scale, softcap, window, ALiBi, head dims, dtype into p (p's sizes must be set).
void fill_options(flash::FwdParams& p, const at::Tensor& q, double softmax_scale, const Options& opt,
                  int headdim_rounded);

// (batch, row, head) strides of a (batch, seqlen, nheads, d) tensor or a packed (total, nheads, d) one.
void set_strides(const at::Tensor& t, int64_t& batch, int64_t& row, int64_t& head);

// fwd() on the KV-cache (decode) kernel, for decode-like shapes (flash::prefer_decode_kernel):
// set by binding_kvcache.cpp when the build has that kernel (both members null otherwise).
struct DecodeForward {
  std::tuple<at::Tensor, at::Tensor> (*run)(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            double softmax_scale, const Options& opt) = nullptr;
  // fwd_varlen() when every sequence has max_seqlen_q query rows (q.size(0) == batch * max_seqlen_q)
  std::tuple<at::Tensor, at::Tensor> (*run_varlen)(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                   const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                                   int64_t max_seqlen_q, double softmax_scale,
                                                   const Options& opt) = nullptr;
  int (*smem_bytes)(int headdim_rounded) = nullptr;  // flash::kvcache_shared_memory_bytes
};
extern DecodeForward decode_forward;

// CPU kernel of every op: one RuntimeError naming the op and the tensor on the CPU.
void refuse_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// One clear error for what a run_* entry point returned (what: "forward", "backward", ...).
void check_launch(cudaError_t err, const flash::FwdParams& p, const char* what);

}  // namespace flash_binding
