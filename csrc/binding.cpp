// The only torch-aware file: tensors -> FwdParams, op registration (torch.library), and the
// last line of defence on inputs. Friendly validation happens first in Python
// (flash_attn_cuda/_validate.py); these checks catch direct calls of the raw op.
#include <Python.h>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "binding_common.h"
#include "flash_api.h"
#include "philox.h"
#include "heuristics.h"

// Shared with binding_kvcache.cpp through binding_common.h (declarations there).
namespace flash_binding {

DecodeForward decode_forward;

// Numbers in error messages go through snprintf, never through an ostream: on the H200 host
// (torch 2.11 wheel) streaming a double into TORCH_CHECK's message crashed the process with
// SIGSEGV inside std::ostream::_M_insert<double> instead of raising (measured 2026-11-30);
// integers take the same path to be safe.
std::string num(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", x);
  return text;
}
std::string num(int64_t x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%lld", static_cast<long long>(x));
  return text;
}

// ndim 4: (batch, seqlen, nheads, headdim); ndim 3: packed varlen (total_tokens, nheads, headdim).
void check_input(const at::Tensor& t, const char* name, int64_t ndim) {
  TORCH_CHECK(t.is_cuda(), "flash_attn_cuda: ", name, " must be a CUDA tensor, got device ", t.device());
  TORCH_CHECK(t.dim() == ndim, "flash_attn_cuda: ", name, " must be ",
              ndim == 4 ? "4-D (batch, seqlen, nheads, headdim)" : "3-D (total_tokens, nheads, headdim)", ", got ",
              num(t.dim()), "-D");
  TORCH_CHECK(t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16, "flash_attn_cuda: ", name,
              " must be float16 or bfloat16, got ", t.scalar_type());
  TORCH_CHECK(t.stride(-1) == 1, "flash_attn_cuda: ", name, " must have a contiguous last dimension");
  bool aligned = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  for (int64_t d = 0; d + 1 < ndim; ++d) { aligned = aligned && t.stride(d) % 8 == 0; }
  TORCH_CHECK(aligned, "flash_attn_cuda: ", name,
              " must be 16-byte aligned (data pointer and batch/seq/head strides multiples of 8 elements); "
              "call .contiguous() on it");
}

// The scale as the kernels use it (float32). They take the row max of raw scores, so only a
// positive scale is right; denormals would be flushed to zero.
float checked_scale(double softmax_scale) {
  const float scale = static_cast<float>(softmax_scale);
  TORCH_CHECK(std::isnormal(scale) && scale > 0.f && scale <= std::numeric_limits<float>::max() / 2,
              "flash_attn_cuda: softmax_scale must be a positive normal float32, got ", num(softmax_scale));
  return scale;
}

// One clear error for whatever run_fwd / run_bwd returned (what: "forward" or "backward").
// cudaErrorNotSupported: the options need the feature kernels (fwd_launch.h); cudaErrorInvalidValue:
// sizes/options outside params_supported, or no kernel for this dtype and head dim.
void check_launch(cudaError_t err, const flash::FwdParams& p, const char* what) {
  TORCH_CHECK(err != cudaErrorNotSupported, "flash_attn_cuda: window_size with a left edge, softcap, alibi_slopes, "
              "dropout and varlen batches need the feature kernels, which this build left out (FLASH_ATTN_CUDA_FEATURES=0); "
              "rebuild without that flag");
  TORCH_CHECK(err != cudaErrorInvalidValue || flash::params_supported(p), "flash_attn_cuda: the ", what,
              " kernels do not support these sizes or options (softmax_scale ", num(double(p.softmax_scale)),
              ", softcap ", num(double(p.softcap)), ", seqlen_q ", num(int64_t(p.seqlen_q)), ", seqlen_k ",
              num(int64_t(p.seqlen_k)), ")");
  TORCH_CHECK(err != cudaErrorInvalidValue, "flash_attn_cuda: this build has no ", what, " kernel for dtype ",
              p.dtype == flash::DType::kFloat16 ? "float16" : "bfloat16", " and head dim ",
              num(int64_t(p.headdim_rounded)));
  TORCH_CHECK(err == cudaSuccess, "flash_attn_cuda: ", what, " kernel launch failed: ", cudaGetErrorString(err),
              err == cudaErrorNoKernelImageForDevice ? " (this build was not compiled for this GPU's arch; "
                                                       "rebuild with FLASH_ATTN_CUDA_ARCHS including it)"
                                                     : "");
}

// The forward's GPU requirement on q's device (call under its device guard): sm80+.
void check_fwd_device(const at::Tensor& q) {
  const auto* props = at::cuda::getDeviceProperties(q.get_device());
  TORCH_CHECK(props->major >= 8, "flash_attn_cuda: needs a GPU of compute capability >= 8.0 (Ampere), got ",
              num(int64_t(props->major)), ".", num(int64_t(props->minor)));
}

// FLASH_ATTN_CUDA_SMEM_BUDGET, read on every call (tests and benchmarks switch it between calls): a
// cap in KB on the shared memory per thread block the tile tables may plan for (smem_budget.h), so
// that an H200 runs the tiles of A100 (163) or sm86/sm89 (99). Unset or empty: 0, no cap (the
// GPU's opt-in limit alone). Anything but a positive integer is one clear error.
int smem_budget_from_env() {
  const char* raw = std::getenv("FLASH_ATTN_CUDA_SMEM_BUDGET");
  std::string value = raw == nullptr ? "" : raw;
  const size_t begin = value.find_first_not_of(" \t"), end = value.find_last_not_of(" \t");
  value = begin == std::string::npos ? "" : value.substr(begin, end - begin + 1);
  if (value.empty()) { return 0; }
  bool digits = value.size() <= 6;
  for (char c : value) { digits = digits && std::isdigit(static_cast<unsigned char>(c)); }
  const int kb = digits ? std::atoi(value.c_str()) : 0;
  TORCH_CHECK(kb > 0, "flash_attn_cuda: FLASH_ATTN_CUDA_SMEM_BUDGET must be a positive number of KB (e.g. 163 or "
              "99) or unset, got '", raw, "'");
  return kb;
}

// The tiles the last forward call of this thread / the last backward call of the process launched
// (sm80 family): {block_m, block_n, warps, q_stages, smem_bytes, budget row in KB}; empty when no
// sm80-family kernel ran (the sm90 family, the decode kernel, empty inputs) or before any call.
// Tests read them (last_fwd_tile, last_bwd_tile ops) to check which tile really ran under a budget.
// The backward is process-wide: autograd runs it on its own device thread.
thread_local std::vector<int64_t> last_fwd_tile_desc;
std::mutex last_bwd_tile_mutex;
std::vector<int64_t> last_bwd_tile_desc;  // guarded by last_bwd_tile_mutex

std::string last_bwd_family_name;  // "sm80" / "sm90": the backward main kernel's family; guarded by the mutex
void set_last_bwd_tile(std::vector<int64_t> desc, const char* family = "sm80") {
  const std::lock_guard<std::mutex> lock(last_bwd_tile_mutex);
  last_bwd_tile_desc = std::move(desc);
  last_bwd_family_name = family;
}

std::vector<int64_t> describe(const flash::KernelTile& t) {
  return {t.block_m, t.block_n, t.warps, t.q_stages, t.smem_bytes, t.budget_kb};
}

// "this GPU (NAME) allows N KB" or, capped by the knob, "... capped to N KB by FLASH_ATTN_CUDA_SMEM_BUDGET".
std::string smem_limit_text(const at::Tensor& q, int budget_bytes) {
  const auto* props = at::cuda::getDeviceProperties(q.get_device());
  const int64_t optin_kb = static_cast<int64_t>(props->sharedMemPerBlockOptin / 1024);
  std::string text = std::string("this GPU (") + props->name + ") allows " + num(optin_kb) + " KB";
  if (budget_bytes / 1024 < optin_kb) {
    text += ", capped to " + num(int64_t(budget_bytes / 1024)) + " KB by FLASH_ATTN_CUDA_SMEM_BUDGET";
  }
  if (!flash::kSmemTilesCompiled) {
    text += "; this build has no small-memory tiles (built with FLASH_ATTN_CUDA_SMEM_TILES=1, or by default when "
            "FLASH_ATTN_CUDA_ARCHS lists an arch below 9.0)";
  }
  return text;
}

// The shared memory of the forward kernel that will run (`family`, resolved), on q's device (call
// under its guard): some tile of the sm80 family's table for headdim_rounded must fit the budget
// (flash::fwd_tile); every row fits 99 KB, so this refuses only budgets capped below that. The sm90
// family runs only on compute capability 9.0 with its whole 227 KB (fwd_family checks the budget).
void check_fwd_smem(const at::Tensor& q, const flash::FwdParams& p, flash::FwdFamily family) {
  if (family == flash::FwdFamily::kSm90) { return; }
  const flash::KernelTile tile = flash::fwd_tile(p);
  TORCH_CHECK(tile.smem_bytes >= 0, "flash_attn_cuda: head dim ", num(int64_t(p.headdim)), " runs the head-dim-",
              num(int64_t(p.headdim_rounded)), " forward kernel, and no tile of it fits the shared memory per block: ",
              smem_limit_text(q, tile.budget_bytes), " (the smallest tile needs ",
              num(int64_t(flash::fwd_smallest_shared_memory_bytes(p.headdim_rounded) / 1024)), " KB)");
}

// FLASH_ATTN_CUDA_SM90_PERSISTENT_CTAS, read on every forward call (benchmarks and tests switch it
// between calls): unset or empty -> the build's kernel (the persistent one with one CTA per SM, -1,
// where it is compiled: FLASH_ATTN_CUDA_SM90_PERSISTENT=1, the default, or both; else 0); "0" -> 0,
// one CTA per tile; "sms" -> -1; a positive integer N -> the persistent kernel with at most N CTAs
// (tests run several tiles per CTA on small shapes). Anything else is one clear error at once. A kernel
// the build left out (build_config.py) is an error only for a call the sm90 family serves (missing: the
// message; ctas then -1, a placeholder): calls that the sm80 family serves ignore the knob.
struct PersistentKnob {
  int ctas = -1;
  std::string missing;  // non-empty: the asked-for sm90 forward kernel is not in this build
};

PersistentKnob sm90_persistent_knob_from_env() {
  const char* raw = std::getenv("FLASH_ATTN_CUDA_SM90_PERSISTENT_CTAS");
  std::string value = raw == nullptr ? "" : raw;
  const size_t begin = value.find_first_not_of(" \t"), end = value.find_last_not_of(" \t");
  value = begin == std::string::npos ? "" : value.substr(begin, end - begin + 1);
#ifdef FLASH_ATTN_CUDA_SM90_PERSISTENT
  constexpr bool kPersistentBuilt = true;
#else
  constexpr bool kPersistentBuilt = false;
#endif
#ifdef FLASH_ATTN_CUDA_SM90_NO_ONE_TILE
  constexpr bool kOneTileBuilt = false;
#else
  constexpr bool kOneTileBuilt = true;
#endif
  if (value.empty()) { return {kPersistentBuilt ? -1 : 0, ""}; }
  if (value == "0") {
    if (kOneTileBuilt) { return {0, ""}; }
    return {-1, "flash_attn_cuda: FLASH_ATTN_CUDA_SM90_PERSISTENT_CTAS=0 asks for the one-CTA-per-tile sm90 forward, "
                "which this build left out (build with FLASH_ATTN_CUDA_SM90_PERSISTENT=0 or both)"};
  }
  int ctas = -1;
  if (value != "sms") {
    bool digits = value.size() <= 6;
    for (char c : value) { digits = digits && std::isdigit(static_cast<unsigned char>(c)); }
    ctas = digits ? std::atoi(value.c_str()) : 0;
    TORCH_CHECK(ctas > 0, "flash_attn_cuda: FLASH_ATTN_CUDA_SM90_PERSISTENT_CTAS must be 'sms', a positive number of "
                "CTAs, or 0 / unset, got '", raw, "'");
  }
  if (kPersistentBuilt) { return {ctas, ""}; }
  return {0, std::string("flash_attn_cuda: FLASH_ATTN_CUDA_SM90_PERSISTENT_CTAS is set ('") + raw +
                 "') but this build has no persistent sm90 forward (build with FLASH_ATTN_CUDA_SM90_PERSISTENT=1 or both)"};
}

// FLASH_ATTN_CUDA_FAMILY, read on every forward call (tests and benchmarks switch it between calls):
// unset, empty or "auto" -> kAuto; "sm80" / "sm90" force a family (sm90 falls back to sm80 on calls it
// cannot serve). Anything else is one clear error.
flash::FwdFamily family_from_env() {
  const char* raw = std::getenv("FLASH_ATTN_CUDA_FAMILY");
  std::string value = raw == nullptr ? "" : raw;
  for (char& c : value) { c = static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }
  const size_t begin = value.find_first_not_of(" \t"), end = value.find_last_not_of(" \t");
  value = begin == std::string::npos ? "" : value.substr(begin, end - begin + 1);
  if (value.empty() || value == "auto") { return flash::FwdFamily::kAuto; }
  if (value == "sm80") { return flash::FwdFamily::kSm80; }
  if (value == "sm90") { return flash::FwdFamily::kSm90; }
  TORCH_CHECK(false, "flash_attn_cuda: FLASH_ATTN_CUDA_FAMILY must be sm80, sm90 or auto (or unset), got '", raw, "'");
}

// FLASH_ATTN_CUDA_POISON_SCRATCH=1 (tests), read on every backward call: the backward's dq_accum is
// filled with NaN before the launch, so a kernel that reads a dQ tile nobody initialised fails the
// gradient checks instead of reading whatever the allocator handed out (often zeros).
bool poison_scratch_from_env() {
  const char* raw = std::getenv("FLASH_ATTN_CUDA_POISON_SCRATCH");
  return raw != nullptr && raw[0] == '1' && raw[1] == '\0';
}

// What served this thread's last forward call (fwd, fwd_varlen): "sm80", "sm90", "decode" (the
// KV-cache kernel, for decode-like shapes), "none" (empty inputs: no kernel), "" before any call.
// Tests read it (last_fwd_family op) to check which family really ran.
thread_local std::string last_family;

// Whether fwd() runs on the KV-cache (decode) kernel (call under q's device guard): decode-like
// shapes (flash::prefer_decode_kernel: the KV-cache kernel reads K/V once per GQA group and splits
// the keys across SMs; same out and lse, so the backward is unchanged), when the build has that
// kernel, this GPU gives it its shared memory (sm86/89: 99 KB) and, in builds without the feature
// kernels, the options need none of them (the backward could not serve them).
bool has_features();

bool use_decode_forward(const at::Tensor& q, int64_t seqlen_q, int64_t group, int64_t seqlen_k, int headdim_rounded,
                        const Options& opt) {
  if (decode_forward.run == nullptr || q.size(0) == 0 || opt.dropout_p > 0.0 ||  // no dropout there
      !flash::prefer_decode_kernel(static_cast<int>(seqlen_q), static_cast<int>(group))) {
    return false;
  }
  const bool mods = opt.softcap > 0.0 || (opt.alibi_slopes != nullptr && opt.alibi_slopes->has_value()) ||
                    (opt.window_left >= 0 && opt.window_left < seqlen_k);
  if (mods && !has_features()) { return false; }
  const int smem = decode_forward.smem_bytes(headdim_rounded);
  flash::FwdParams budget;  // the device's opt-in limit, capped by FLASH_ATTN_CUDA_SMEM_BUDGET
  budget.smem_budget_kb = smem_budget_from_env();
  return smem >= 0 && smem <= flash::smem_budget_bytes(budget);
}

// alibi_slopes: float32, contiguous, on q's device, (nheads,) or (batch, nheads).
void check_alibi(const std::optional<at::Tensor>& slopes, const at::Tensor& q, int64_t batch, int64_t nheads) {
  if (!slopes.has_value()) { return; }
  const at::Tensor& s = *slopes;
  TORCH_CHECK(s.scalar_type() == at::kFloat && s.is_contiguous() && s.device() == q.device(),
              "flash_attn_cuda: alibi_slopes must be a contiguous float32 tensor on q's device");
  const bool per_head = s.dim() == 1 && s.size(0) == nheads;
  const bool per_batch = s.dim() == 2 && s.size(0) == batch && s.size(1) == nheads;
  TORCH_CHECK(per_head || per_batch, "flash_attn_cuda: alibi_slopes must be (nheads,) or (batch, nheads)");
}

// One side of the window: -1 (unbounded) or a key count; anything past the longest sequence
// is unbounded too, which keeps the kernels' int32 window arithmetic in range.
int window_side(int64_t w, const char* name) {
  TORCH_CHECK(w >= -1, "flash_attn_cuda: window_size ", name, " must be -1 (unbounded) or >= 0, got ", num(w));
  return w > flash::kMaxSeqlen ? -1 : static_cast<int>(w);
}

// dropout_p in [0, 1) and not above 511/512, where the 8-bit keep threshold (philox.h) is 0 (the
// Python wrappers raise ValueError first; this guards the raw ops).
float checked_dropout(double dropout_p) {
  TORCH_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "flash_attn_cuda: dropout_p must be in [0, 1), got ",
              num(dropout_p));
  TORCH_CHECK(dropout_p == 0.0 || flash::dropout_threshold(dropout_p) > 0, "flash_attn_cuda: dropout_p ",
              num(dropout_p), " keeps no element at the kernels' 8-bit resolution (round((1 - p) * 256) = 0); ",
              "the largest is 511/512");
  return static_cast<float>(dropout_p);
}

float checked_softcap(double softcap) {
  TORCH_CHECK(softcap == 0.0 || (std::isnormal(static_cast<float>(softcap)) && softcap > 0.0),
              "flash_attn_cuda: softcap must be 0 (off) or a positive normal float32, got ", num(softcap));
  return static_cast<float>(softcap);
}

// What every op checks of its options before allocating anything: scale, softcap, window sides,
// ALiBi slopes (against batch x nheads). Returns the compiled head dim the call runs.
int check_options(const at::Tensor& q, int64_t batch, int64_t nheads, int64_t headdim, double softmax_scale,
                  const Options& opt) {
  checked_scale(softmax_scale);
  checked_softcap(opt.softcap);
  window_side(opt.window_left, "left");
  window_side(opt.window_right, "right");
  check_alibi(*opt.alibi_slopes, q, batch, nheads);
  checked_dropout(opt.dropout_p);
  const int headdim_rounded = flash::round_head_dim(static_cast<int>(headdim));
  TORCH_CHECK(headdim_rounded > 0, "flash_attn_cuda: head dim ", num(headdim),
              " is larger than every head dim compiled into this build");
  return headdim_rounded;
}

void fill_options(flash::FwdParams& p, const at::Tensor& q, double softmax_scale, const Options& opt,
                  int headdim_rounded);
void fill_dropout(flash::FwdParams& p, double dropout_p);

// (batch, row, head) strides of a (batch, seqlen, nheads, d) tensor, or of a packed varlen
// (total, nheads, d) one, which has no batch dimension (batch stride 0).
void set_strides(const at::Tensor& t, int64_t& batch, int64_t& row, int64_t& head) {
  const int64_t r = t.dim() - 3;  // the row dimension
  batch = r == 0 ? 0 : t.stride(0);
  row = t.stride(r);
  head = t.stride(r + 1);
}

// Pointers and strides of q, k, v, out, lse: dense 4-D or packed 3-D tensors alike.
void fill_tensors(flash::FwdParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& out, const at::Tensor& lse) {
  p.q_ptr = q.data_ptr();
  p.k_ptr = k.data_ptr();
  p.v_ptr = v.data_ptr();
  p.o_ptr = out.data_ptr();
  p.lse_ptr = lse.data_ptr<float>();
  set_strides(q, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
  set_strides(k, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  set_strides(v, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  set_strides(out, p.o_batch_stride, p.o_row_stride, p.o_head_stride);
}

// The fields both directions share: q, k, v, out, lse, sizes, scale, mask, softcap, dtype.
void fill_fwd_params(flash::FwdParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& out, const at::Tensor& lse, double softmax_scale, const Options& opt,
                     int headdim_rounded) {
  fill_tensors(p, q, k, v, out, lse);
  p.batch = static_cast<int>(q.size(0));
  p.seqlen_q = static_cast<int>(q.size(1));
  p.seqlen_k = static_cast<int>(k.size(1));
  p.nheads = static_cast<int>(q.size(2));
  p.nheads_k = static_cast<int>(k.size(2));
  fill_options(p, q, softmax_scale, opt, headdim_rounded);
}

// Packed varlen tensors: q/out (total_q, nheads, d), k/v (total_k, nheads_k, d), lse (nheads, total_q).
void fill_varlen_params(flash::FwdParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& out, const at::Tensor& lse, const at::Tensor& cu_seqlens_q,
                        const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                        double softmax_scale, const Options& opt, int headdim_rounded) {
  fill_tensors(p, q, k, v, out, lse);
  p.cu_seqlens_q = cu_seqlens_q.data_ptr<int>();
  p.cu_seqlens_k = cu_seqlens_k.data_ptr<int>();
  p.total_q = static_cast<int>(q.size(0));
  p.total_k = static_cast<int>(k.size(0));
  p.batch = static_cast<int>(cu_seqlens_q.size(0) - 1);
  p.seqlen_q = static_cast<int>(max_seqlen_q);
  p.seqlen_k = static_cast<int>(max_seqlen_k);
  p.nheads = static_cast<int>(q.size(1));
  p.nheads_k = static_cast<int>(k.size(1));
  fill_options(p, q, softmax_scale, opt, headdim_rounded);
}

// Scale, softcap, window, ALiBi, head dims, dtype; p's sizes must be set.
void fill_options(flash::FwdParams& p, const at::Tensor& q, double softmax_scale, const Options& opt,
                  int headdim_rounded) {
  p.headdim = static_cast<int>(q.size(-1));
  p.headdim_rounded = headdim_rounded;
  p.softmax_scale = checked_scale(softmax_scale);
  p.softcap = checked_softcap(opt.softcap);
  p.softcap_tanh_scale = p.softcap > 0.f ? static_cast<float>(softmax_scale / opt.softcap) : 0.f;
  // A huge softcap would flush tanh's argument to zero (fast-math denormals): uniform attention.
  TORCH_CHECK(p.softcap == 0.f || (std::isnormal(p.softcap_tanh_scale) &&
                                   std::isfinite(static_cast<float>(opt.softcap * M_LOG2E * 2))),
              "flash_attn_cuda: softcap ", num(opt.softcap), " is out of range for softmax_scale ", num(softmax_scale),
              " (softmax_scale / softcap must be a normal float32 and softcap below about 1e38)");
  // Scores live in units of softcap when it is on (score_mods.h).
  p.scale_log2 = static_cast<float>((p.softcap > 0.f ? opt.softcap : softmax_scale) * M_LOG2E);
  if (opt.alibi_slopes != nullptr && opt.alibi_slopes->has_value()) {
    const at::Tensor& s = **opt.alibi_slopes;
    p.alibi_slopes_ptr = s.data_ptr<float>();
    p.alibi_slopes_batch_stride = s.dim() == 2 ? s.stride(0) : 0;
  }
  // causal = right edge on the diagonal; a left window stays as given. A side that already
  // reaches every key (left >= seqlen_k, right >= seqlen_q) is unbounded: exact, keeps the
  // window arithmetic far from int32 overflow, and sends it to the plain kernel.
  p.window_left = window_side(opt.window_left, "left");
  p.window_right = opt.causal ? 0 : window_side(opt.window_right, "right");
  if (p.window_left >= p.seqlen_k) { p.window_left = -1; }
  if (p.window_right >= p.seqlen_q) { p.window_right = -1; }
  p.dtype = q.scalar_type() == at::kHalf ? flash::DType::kFloat16 : flash::DType::kBFloat16;
  fill_dropout(p, opt.dropout_p);
}

// dropout_p's keep threshold t (8-bit Philox numbers, philox.h) and scale 256 / t (unbiased for the
// keep rate t / 256 the kernels have); the generator state is the caller's (forward: philox_for_call;
// backward: the forward's rng_state).
void fill_dropout(flash::FwdParams& p, double dropout_p) {
  p.dropout_p = checked_dropout(dropout_p);
  if (p.dropout_p == 0.f) { return; }
  // A p so small that t rounds to 256 (p < 1/512) keeps everything: still the dropout kernel.
  p.dropout_threshold = flash::dropout_threshold(dropout_p);
  p.rp_dropout = 256.f / static_cast<float>(p.dropout_threshold);
}

// Reserves batch * nheads Philox counters (one per (batch, head): philox.h) of the CUDA default
// generator of q's device, as PyTorch's own kernels do (the generator's lock held; under CUDA-graph
// capture the state is device pointers that each replay advances).
flash::PhiloxState philox_for_call(const at::Tensor& q, int64_t batch, int64_t nheads) {
  auto* gen = at::get_generator_or_default<at::CUDAGeneratorImpl>(
      std::nullopt, at::cuda::detail::getDefaultCUDAGenerator(q.get_device()));
  at::PhiloxCudaState state;
  {
    std::lock_guard<std::mutex> lock(gen->mutex_);
    state = gen->philox_cuda_state(static_cast<uint64_t>(batch * nheads));
  }
  flash::PhiloxState p;
  p.captured = state.captured_;
  if (state.captured_) {
    p.seed_ptr = state.seed_.ptr;
    p.offset_ptr = state.offset_.ptr;
    p.offset_intragraph = state.offset_intragraph_;
  } else {
    p.seed = state.seed_.val;
    p.offset = state.offset_.val;
  }
  return p;
}

// The forward's rng_state: int64 (2,) (seed, offset) written by the kernel (dropout.h), or (0,)
// without dropout. Calls that launch no kernel (empty inputs) write it here when the values are
// on the host (outside graph capture); their backward reads no mask anyway.
at::Tensor make_rng_state(const at::Tensor& q, double dropout_p) {
  // the float32 p the kernels use decides (fill_dropout), so a p that rounds to 0 has no state
  return at::empty({static_cast<float>(dropout_p) > 0.f ? 2 : 0}, q.options().dtype(at::kLong));
}
void set_forward_rng(flash::FwdParams& p, const at::Tensor& q, const at::Tensor& rng_state) {
  if (p.dropout_p == 0.f) { return; }
  p.philox = philox_for_call(q, p.batch, p.nheads);
  p.rng_state_ptr = rng_state.data_ptr<int64_t>();
}
void fill_rng_state_on_host(at::Tensor& rng_state) {
  if (rng_state.numel() == 2) { rng_state.zero_(); }
}

// The backward's generator state: the forward's rng_state (device pointers, read by the kernel, so a
// graph-captured backward follows its forward's replays).
void set_backward_rng(flash::FwdParams& p, const std::optional<at::Tensor>& rng_state, const at::Tensor& q) {
  if (p.dropout_p == 0.f) { return; }
  TORCH_CHECK(rng_state.has_value() && rng_state->scalar_type() == at::kLong && rng_state->numel() == 2 &&
                  rng_state->is_contiguous() && rng_state->device() == q.device(),
              "flash_attn_cuda: dropout_p > 0 needs the forward's rng_state (int64 (2,) on q's device)");
  const int64_t* state = rng_state->data_ptr<int64_t>();
  p.philox.captured = true;
  p.philox.seed_ptr = state;
  p.philox.offset_ptr = state + 1;
  p.philox.offset_intragraph = 0;
}

// Runs the forward of filled params p on the family `family` asks for (resolved by flash::fwd_family on
// q's device, under its guard), after the shared-memory check of the family that will run; records it.
void launch_forward(flash::FwdParams& p, const at::Tensor& q, flash::FwdFamily family, const char* what) {
  p.family = family;
  p.smem_budget_kb = smem_budget_from_env();
  const PersistentKnob knob = sm90_persistent_knob_from_env();
  p.sm90_persistent_ctas = knob.ctas;
  const flash::FwdFamily will_run = flash::fwd_family(p);
  TORCH_CHECK(knob.missing.empty() || will_run != flash::FwdFamily::kSm90, knob.missing);
  check_fwd_smem(q, p, will_run);
  // The persistent sm90 forward's tile counter, for the calls whose kernel draws its tiles from it
  // (causal, and d = 64): one int (stream-ordered caching allocator, zeroed by the launch on the
  // stream: graph capture records the memset), kept alive until the launch is queued.
  at::Tensor tile_counter;
  if (will_run == flash::FwdFamily::kSm90 && flash::sm90_fwd_needs_tile_counter(p)) {
    tile_counter = at::empty({1}, q.options().dtype(at::kInt));
    p.sm90_tiles.counter = tile_counter.data_ptr<int>();
  }
  flash::FwdFamily ran = flash::FwdFamily::kSm80;
  check_launch(flash::run_fwd(p, at::cuda::getCurrentCUDAStream(), &ran), p, what);
  last_family = flash::family_name(ran);
  if (ran == flash::FwdFamily::kSm80) { last_fwd_tile_desc = describe(flash::fwd_tile(p)); }
}

// deterministic only matters to the backward; the forward takes it so that autograd's context
// (which sees the forward's inputs) can hand it on.
// Returns (out, lse, rng_state): rng_state as make_rng_state describes, the backward's input.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                   double softmax_scale, bool causal, bool /*deterministic*/,
                                                   int64_t window_left, int64_t window_right, double softcap,
                                                   const std::optional<at::Tensor>& alibi_slopes, double dropout_p) {
  const Options opt{causal, window_left, window_right, softcap, &alibi_slopes, dropout_p};
  check_input(q, "q");
  check_input(k, "k");
  check_input(v, "v");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              "flash_attn_cuda: q, k, v must share a dtype");
  TORCH_CHECK(k.device() == q.device() && v.device() == q.device(), "flash_attn_cuda: q, k, v must be on one device");
  const int64_t batch = q.size(0), seqlen_q = q.size(1), nheads = q.size(2), headdim = q.size(3);
  const int64_t seqlen_k = k.size(1), nheads_k = k.size(2);
  TORCH_CHECK(k.size(0) == batch && v.size(0) == batch, "flash_attn_cuda: batch sizes of q, k, v differ");
  TORCH_CHECK(v.size(1) == seqlen_k, "flash_attn_cuda: k and v seqlens differ");
  TORCH_CHECK(v.size(2) == nheads_k, "flash_attn_cuda: k and v head counts differ");
  TORCH_CHECK(nheads_k > 0 && nheads % nheads_k == 0, "flash_attn_cuda: nheads of q (", num(nheads),
              ") must be a multiple of nheads of k/v (", num(nheads_k), ")");
  TORCH_CHECK(k.size(3) == headdim && v.size(3) == headdim, "flash_attn_cuda: head dims of q, k, v differ");
  TORCH_CHECK(headdim % 8 == 0 && headdim > 0 && headdim <= 256,
              "flash_attn_cuda: head dim must be a multiple of 8 in [8, 256], got ", num(headdim));
  TORCH_CHECK(batch <= 65535 && nheads <= 65535, "flash_attn_cuda: batch and nheads must be <= 65535");
  TORCH_CHECK(seqlen_q <= flash::kMaxSeqlen && seqlen_k <= flash::kMaxSeqlen,
              "flash_attn_cuda: sequence lengths must be <= ", num(int64_t(flash::kMaxSeqlen)), ", got ",
              num(seqlen_q), " and ", num(seqlen_k));
  const int headdim_rounded = check_options(q, batch, nheads, headdim, softmax_scale, opt);  // before any allocation
  const flash::FwdFamily family = family_from_env();

  const c10::cuda::CUDAGuard device_guard(q.device());
  at::Tensor rng_state = make_rng_state(q, dropout_p);
  if (use_decode_forward(q, seqlen_q, nheads / nheads_k, seqlen_k, headdim_rounded, opt)) {
    last_family = "decode";
    last_fwd_tile_desc.clear();
    auto [out, lse] = decode_forward.run(q, k, v, softmax_scale, opt);
    return {out, lse, rng_state};
  }
  check_fwd_device(q);

  at::Tensor out = at::empty(q.sizes(), q.options());
  at::Tensor lse = at::empty({batch, nheads, seqlen_q}, q.options().dtype(at::kFloat));
  last_family = "none";
  last_fwd_tile_desc.clear();
  if (out.numel() == 0 || seqlen_k == 0) {
    fill_rng_state_on_host(rng_state);
    if (out.numel() == 0) { return {out, lse, rng_state}; }
    // nothing to attend to: O = 0, LSE = -inf, like rows masked out entirely
    out.zero_();
    lse.fill_(-std::numeric_limits<float>::infinity());
    return {out, lse, rng_state};
  }

  flash::FwdParams p;
  fill_fwd_params(p, q, k, v, out, lse, softmax_scale, opt, headdim_rounded);
  set_forward_rng(p, q, rng_state);
  launch_forward(p, q, family, "forward");
  return {out, lse, rng_state};
}

// Packed varlen q (total_q, nheads, d), k/v (total_k, nheads_k, d) and int32 (batch + 1,) prefix
// sums; returns batch. The prefix sums' values are the Python wrapper's to check (a device sync).
int64_t check_varlen_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                            int64_t max_seqlen_k) {
  check_input(q, "q", 3);
  check_input(k, "k", 3);
  check_input(v, "v", 3);
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              "flash_attn_cuda: q, k, v must share a dtype");
  for (const at::Tensor* t : {&k, &v, &cu_seqlens_q, &cu_seqlens_k}) {
    TORCH_CHECK(t->device() == q.device(), "flash_attn_cuda: q, k, v, cu_seqlens_q/k must be on one device");
  }
  for (const at::Tensor* t : {&cu_seqlens_q, &cu_seqlens_k}) {
    TORCH_CHECK(t->scalar_type() == at::kInt && t->dim() == 1 && t->is_contiguous() && t->size(0) >= 1,
                "flash_attn_cuda: cu_seqlens_q/k must be contiguous 1-D int32 (batch + 1,)");
  }
  TORCH_CHECK(cu_seqlens_q.size(0) == cu_seqlens_k.size(0), "flash_attn_cuda: cu_seqlens_q and cu_seqlens_k "
              "must have the same length (batch + 1)");
  const int64_t batch = cu_seqlens_q.size(0) - 1, nheads = q.size(1), nheads_k = k.size(1), headdim = q.size(2);
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(2) == headdim, "flash_attn_cuda: k and v must be "
              "(total_k, nheads_k, headdim) with q's head dim");
  TORCH_CHECK(nheads_k > 0 && nheads % nheads_k == 0, "flash_attn_cuda: nheads must be a multiple of nheads_k");
  TORCH_CHECK(headdim % 8 == 0 && headdim > 0 && headdim <= 256,
              "flash_attn_cuda: head dim must be a multiple of 8 in [8, 256], got ", num(headdim));
  TORCH_CHECK(batch <= 65535 && nheads <= 65535, "flash_attn_cuda: batch and nheads must be <= 65535");
  TORCH_CHECK(max_seqlen_q >= 0 && max_seqlen_k >= 0 && max_seqlen_q <= flash::kMaxSeqlen &&
                  max_seqlen_k <= flash::kMaxSeqlen && q.size(0) <= INT32_MAX && k.size(0) <= INT32_MAX,
              "flash_attn_cuda: max_seqlen_q/k must be in [0, 2^30] and total tokens fit int32");
  return batch;
}

// Variable-length forward on packed tensors (flash-attn's varlen layout). max_seqlen_q/k size
// the grid and must bound every sequence (the Python wrapper checks the values when it can).
std::tuple<at::Tensor, at::Tensor, at::Tensor> fwd_varlen(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, double softmax_scale, bool causal,
    bool /*deterministic*/, int64_t window_left, int64_t window_right, double softcap,
    const std::optional<at::Tensor>& alibi_slopes, double dropout_p) {
  const Options opt{causal, window_left, window_right, softcap, &alibi_slopes, dropout_p};
  const int64_t batch = check_varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
  const int64_t nheads = q.size(1), headdim = q.size(2);
  const int headdim_rounded = check_options(q, batch, nheads, headdim, softmax_scale, opt);  // before any allocation
  const flash::FwdFamily family = family_from_env();

  const c10::cuda::CUDAGuard device_guard(q.device());
  at::Tensor rng_state = make_rng_state(q, dropout_p);
  // Decode-like varlen batches with one query length (e.g. one new token per sequence, total_q ==
  // batch): the KV-cache kernel, as fwd() does (same out and lse layout, so the backward is unchanged).
  if (decode_forward.run_varlen != nullptr && batch > 0 && q.size(0) == batch * max_seqlen_q && has_features() &&
      use_decode_forward(q, max_seqlen_q, nheads / k.size(1), max_seqlen_k, headdim_rounded, opt)) {
    last_family = "decode";
    last_fwd_tile_desc.clear();
    auto [out, lse] = decode_forward.run_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, softmax_scale, opt);
    return {out, lse, rng_state};
  }
  check_fwd_device(q);
  at::Tensor out = at::empty(q.sizes(), q.options());
  at::Tensor lse = at::empty({nheads, q.size(0)}, q.options().dtype(at::kFloat));
  last_family = "none";
  last_fwd_tile_desc.clear();
  if (out.numel() == 0) {
    fill_rng_state_on_host(rng_state);
    return {out, lse, rng_state};
  }
  // No sequence (or none with keys): rows outside every sequence get O = 0, LSE = -inf. Only
  // inconsistent prefix sums (raw op, compiled graph) leave rows outside every sequence.
  if (batch == 0 || max_seqlen_q == 0 || max_seqlen_k == 0) {
    fill_rng_state_on_host(rng_state);
    out.zero_();
    lse.fill_(-std::numeric_limits<float>::infinity());
    return {out, lse, rng_state};
  }
  flash::FwdParams p;
  fill_varlen_params(p, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                     opt, headdim_rounded);
  set_forward_rng(p, q, rng_state);
  launch_forward(p, q, family, "varlen forward");
  return {out, lse, rng_state};
}

#ifdef FLASH_ATTN_CUDA_BACKWARD
// The backward's shared memory on q's GPU (call under its device guard): some tile of the table for
// headdim_rounded must fit the budget (flash::bwd_tile; every row fits 99 KB). Returns the budget cap
// (FLASH_ATTN_CUDA_SMEM_BUDGET, KB; 0 none) for the params, so that the check and the launch see one value.
int check_bwd_smem(const at::Tensor& q, int headdim_rounded, double dropout_p) {
  flash::BwdParams probe;
  probe.headdim_rounded = headdim_rounded;
  probe.smem_budget_kb = smem_budget_from_env();
  const flash::KernelTile tile = flash::bwd_tile(probe);
  TORCH_CHECK(tile.smem_bytes >= 0, "flash_attn_cuda: no backward tile for head dim ", num(int64_t(headdim_rounded)),
              " fits the shared memory per block: ", smem_limit_text(q, tile.budget_bytes), " (the smallest tile needs ",
              num(int64_t(flash::bwd_smallest_shared_memory_bytes(headdim_rounded) / 1024)), " KB)");
  TORCH_CHECK(dropout_p <= 0.0 || flash::dropout_tile(tile.block_n),
              "flash_attn_cuda: attention dropout in the backward needs a tile at least 64 keys wide; head dim ",
              num(int64_t(headdim_rounded)), " under ", smem_limit_text(q, tile.budget_bytes), " runs a ",
              num(int64_t(tile.block_n)), "-key tile (as flash-attn 2, no dropout backward there)");
  return probe.smem_budget_kb;
}

// dk/dv of each query head viewed by GQA group: (..., nheads, d) -> (..., nheads_k, group, d); summing
// dim -2 gives (..., nheads_k, d).
at::Tensor sum_groups_view(const at::Tensor& per_q_head, int64_t nheads_k) {
  const int64_t nheads = per_q_head.size(-2);
  std::vector<int64_t> shape(per_q_head.sizes().begin(), per_q_head.sizes().end() - 2);
  shape.insert(shape.end(), {nheads_k, nheads / nheads_k, per_q_head.size(-1)});
  return per_q_head.view(shape);
}

// p holds the forward's fields (fill_fwd_params / fill_varlen_params). Allocates the scratch of
// params.h, points p at dout and the gradients (dk/dv per query head; strides by set_strides),
// launches.
void launch_backward(flash::BwdParams& p, const at::Tensor& dout, const at::Tensor& dq, const at::Tensor& dk,
                     const at::Tensor& dv, bool deterministic) {
  const bool varlen = p.cu_seqlens_q != nullptr;
  p.deterministic = deterministic;
  p.seqlen_q_rounded = flash::bwd_rows_rounded(p.seqlen_q);
  p.do_ptr = dout.data_ptr(), p.dq_ptr = dq.data_ptr(), p.dk_ptr = dk.data_ptr(), p.dv_ptr = dv.data_ptr();
  set_strides(dout, p.do_batch_stride, p.do_row_stride, p.do_head_stride);
  set_strides(dq, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride);
  set_strides(dk, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride);
  set_strides(dv, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride);
  p.family = family_from_env();
  // Deterministic: the sm90 backward's dQ semaphores, or the sm80 kernels' dq_accum slices.
  const int64_t semaphores = flash::bwd_dq_semaphores(p);
  at::Tensor dq_semaphores;
  if (semaphores > 0) {
    dq_semaphores = at::empty({semaphores}, dq.options().dtype(at::kInt));  // zeroed by the pre-pass
    p.dq_semaphore_ptr = dq_semaphores.data_ptr<int>();
  }
  p.num_dq_splits = flash::bwd_dq_accum_splits(p, at::cuda::getDeviceProperties(dq.get_device())->multiProcessorCount);
  const auto f32 = dq.options().dtype(at::kFloat);
  const int64_t splits = p.num_dq_splits, nheads = p.nheads, d = p.headdim_rounded;
  at::Tensor dq_accum, delta, lse_log2;
  if (varlen) {
    p.varlen_scratch_rows = flash::bwd_varlen_scratch_rows(p.total_q, p.batch);
    dq_accum = at::empty({splits, nheads, p.varlen_scratch_rows, d}, f32);  // zeroed by the launch
    delta = at::empty({nheads, p.varlen_scratch_rows}, f32);
    lse_log2 = at::empty({nheads, p.varlen_scratch_rows}, f32);
  } else {
    dq_accum = at::empty({splits, p.batch, nheads, p.seqlen_q_rounded, d}, f32);  // zeroed by the launch
    delta = at::empty({p.batch, nheads, p.seqlen_q_rounded}, f32);
    lse_log2 = at::empty({p.batch, nheads, p.seqlen_q_rounded}, f32);
  }
  if (poison_scratch_from_env()) { dq_accum.fill_(std::numeric_limits<float>::quiet_NaN()); }
  p.dq_accum_ptr = dq_accum.data_ptr<float>(), p.delta_ptr = delta.data_ptr<float>();
  p.lse_log2_ptr = lse_log2.data_ptr<float>();
  flash::FwdFamily family = flash::FwdFamily::kSm80;  // the family run_bwd launched
  check_launch(flash::run_bwd(p, at::cuda::getCurrentCUDAStream(), &family), p, "backward");
  set_last_bwd_tile(family == flash::FwdFamily::kSm90 ? std::vector<int64_t>{} : describe(flash::bwd_tile(p)),
                    flash::family_name(family));
}

// The gradient destinations of bwd_into / bwd_varlen_into: dq like q, dk/dv like k/v (shape,
// dtype, device), any strides check_input takes (e.g. views into one packed dqkv tensor).
void check_grads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& dq, const at::Tensor& dk,
                 const at::Tensor& dv) {
  const int64_t ndim = q.dim();
  check_input(dq, "dq", ndim);
  check_input(dk, "dk", ndim);
  check_input(dv, "dv", ndim);
  TORCH_CHECK(dq.sizes() == q.sizes() && dk.sizes() == k.sizes() && dv.sizes() == k.sizes(),
              "flash_attn_cuda: dq must have q's shape and dk, dv k's shape");
  for (const at::Tensor* t : {&dq, &dk, &dv}) {
    TORCH_CHECK(t->device() == q.device() && t->scalar_type() == q.scalar_type(),
                "flash_attn_cuda: dq, dk, dv must have q's dtype and device");
  }
}

// p holds the forward's fields (unless empty: nothing to compute, zero gradients). With GQA
// (nheads_k < nheads) the kernel writes dk/dv per query head into scratch, summed over each group
// into dk/dv; otherwise straight into dk/dv.
void run_backward_into(flash::BwdParams& p, const at::Tensor& dout, const at::Tensor& dq, at::Tensor dk,
                       at::Tensor dv, bool deterministic, bool empty) {
  const int64_t nheads = dq.size(-2), nheads_k = dk.size(-2);
  const bool grouped = nheads != nheads_k;
  std::vector<int64_t> full_shape(dk.sizes().begin(), dk.sizes().end());
  full_shape[full_shape.size() - 2] = nheads;
  at::Tensor dk_full = grouped ? at::empty(full_shape, dq.options()) : dk;  // (..., nheads, d) per query head
  at::Tensor dv_full = grouped ? at::empty(full_shape, dq.options()) : dv;
  if (empty) {
    set_last_bwd_tile({}, "none");
    dq.zero_();
    dk_full.zero_();
    dv_full.zero_();
  } else {
    launch_backward(p, dout, dq, dk_full, dv_full, deterministic);
  }
  if (grouped) {
    at::sum_out(dk, sum_groups_view(dk_full, nheads_k), {-2});
    at::sum_out(dv, sum_groups_view(dv_full, nheads_k), {-2});
  }
}

// Backward (csrc/bwd_kernel.h) into caller-given dq, dk, dv (check_grads). Gradients of out only;
// lse is not differentiable. deterministic: bit-identical gradients run to run, at the cost of
// num_dq_splits float32 copies of dq (see params.h).
void bwd_into(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
              const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dq, const at::Tensor& dk,
              const at::Tensor& dv, double softmax_scale, bool causal, bool deterministic, int64_t window_left,
              int64_t window_right, double softcap, const std::optional<at::Tensor>& alibi_slopes, double dropout_p,
              const std::optional<at::Tensor>& rng_state) {
  const Options opt{causal, window_left, window_right, softcap, &alibi_slopes, dropout_p};
  check_input(q, "q");
  check_input(k, "k");
  check_input(v, "v");
  check_input(out, "out");
  check_input(dout, "dout");
  TORCH_CHECK(dout.sizes() == q.sizes() && out.sizes() == q.sizes(), "flash_attn_cuda: out and dout must have q's shape");
  for (const at::Tensor* t : {&k, &v, &out, &dout, &lse}) {
    TORCH_CHECK(t->device() == q.device(), "flash_attn_cuda: q, k, v, out, dout, lse must be on one device");
  }
  TORCH_CHECK(dout.scalar_type() == q.scalar_type() && out.scalar_type() == q.scalar_type() &&
                  k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              "flash_attn_cuda: q, k, v, out, dout must share a dtype");
  const int64_t batch = q.size(0), seqlen_q = q.size(1), nheads = q.size(2), headdim = q.size(3);
  const int64_t seqlen_k = k.size(1), nheads_k = k.size(2);
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(0) == batch && k.size(3) == headdim,
              "flash_attn_cuda: k and v must be (batch, seqlen_k, nheads_k, headdim) like q");
  TORCH_CHECK(nheads_k > 0 && nheads % nheads_k == 0, "flash_attn_cuda: nheads must be a multiple of nheads_k");
  TORCH_CHECK(lse.is_cuda() && lse.scalar_type() == at::kFloat && lse.is_contiguous() &&
                  lse.sizes() == at::IntArrayRef({batch, nheads, seqlen_q}),
              "flash_attn_cuda: lse must be contiguous float32 (batch, nheads, seqlen_q)");
  TORCH_CHECK(seqlen_q <= flash::kMaxSeqlen && seqlen_k <= flash::kMaxSeqlen && batch <= 65535 && nheads <= 65535,
              "flash_attn_cuda: sizes out of range");
  check_grads(q, k, dq, dk, dv);
  const int headdim_rounded = check_options(q, batch, nheads, headdim, softmax_scale, opt);  // before any allocation

  const c10::cuda::CUDAGuard device_guard(q.device());
  flash::BwdParams p;
  p.smem_budget_kb = check_bwd_smem(q, headdim_rounded, opt.dropout_p);
  const bool empty = q.numel() == 0 || k.numel() == 0;
  if (!empty) {
    fill_fwd_params(p, q, k, v, out, lse, softmax_scale, opt, headdim_rounded);
    set_backward_rng(p, rng_state, q);
  }
  run_backward_into(p, dout, dq, dk, dv, deterministic, empty);
}

// bwd_into with fresh dq (like q), dk, dv (like k, v), contiguous.
std::tuple<at::Tensor, at::Tensor, at::Tensor> bwd(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                                   const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                                   double softmax_scale, bool causal, bool deterministic,
                                                   int64_t window_left, int64_t window_right, double softcap,
                                                   const std::optional<at::Tensor>& alibi_slopes, double dropout_p,
                                                   const std::optional<at::Tensor>& rng_state) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "flash_attn_cuda: q, k, v must be 4-D");
  at::Tensor dq = at::empty(q.sizes(), q.options());
  at::Tensor dk = at::empty(k.sizes(), k.options());
  at::Tensor dv = at::empty(v.sizes(), v.options());
  bwd_into(dout, q, k, v, out, lse, dq, dk, dv, softmax_scale, causal, deterministic, window_left, window_right,
           softcap, alibi_slopes, dropout_p, rng_state);
  return {dq, dk, dv};
}

// Backward of fwd_varlen into caller-given dq, dk, dv (check_grads): packed tensors as there,
// lse (nheads, total_q) from it.
void bwd_varlen_into(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& out, const at::Tensor& lse, const at::Tensor& cu_seqlens_q,
                     const at::Tensor& cu_seqlens_k, const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv,
                     int64_t max_seqlen_q, int64_t max_seqlen_k, double softmax_scale, bool causal,
                     bool deterministic, int64_t window_left, int64_t window_right, double softcap,
                     const std::optional<at::Tensor>& alibi_slopes, double dropout_p,
                     const std::optional<at::Tensor>& rng_state) {
  const Options opt{causal, window_left, window_right, softcap, &alibi_slopes, dropout_p};
  const int64_t batch = check_varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
  const int64_t total_q = q.size(0), nheads = q.size(1);
  const int64_t headdim = q.size(2);
  check_input(out, "out", 3);
  check_input(dout, "dout", 3);
  TORCH_CHECK(dout.sizes() == q.sizes() && out.sizes() == q.sizes(), "flash_attn_cuda: out and dout must have q's shape");
  TORCH_CHECK(dout.scalar_type() == q.scalar_type() && out.scalar_type() == q.scalar_type(),
              "flash_attn_cuda: q, k, v, out, dout must share a dtype");
  for (const at::Tensor* t : {&out, &dout, &lse}) {
    TORCH_CHECK(t->device() == q.device(), "flash_attn_cuda: q, k, v, out, dout, lse must be on one device");
  }
  TORCH_CHECK(lse.scalar_type() == at::kFloat && lse.is_contiguous() &&
                  lse.sizes() == at::IntArrayRef({nheads, total_q}),
              "flash_attn_cuda: lse must be contiguous float32 (nheads, total_q)");
  check_grads(q, k, dq, dk, dv);
  const int headdim_rounded = check_options(q, batch, nheads, headdim, softmax_scale, opt);  // before any allocation

  const c10::cuda::CUDAGuard device_guard(q.device());
  flash::BwdParams p;
  p.smem_budget_kb = check_bwd_smem(q, headdim_rounded, opt.dropout_p);
  const bool empty = q.numel() == 0 || k.numel() == 0 || batch == 0 || max_seqlen_q == 0 || max_seqlen_k == 0;
  if (!empty) {
    fill_varlen_params(p, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                       opt, headdim_rounded);
    set_backward_rng(p, rng_state, q);
  }
  run_backward_into(p, dout, dq, dk, dv, deterministic, empty);
}

// bwd_varlen_into with fresh dq (like q), dk, dv (like k, v), contiguous.
std::tuple<at::Tensor, at::Tensor, at::Tensor> bwd_varlen(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
    int64_t max_seqlen_k, double softmax_scale, bool causal, bool deterministic, int64_t window_left,
    int64_t window_right, double softcap, const std::optional<at::Tensor>& alibi_slopes, double dropout_p,
    const std::optional<at::Tensor>& rng_state) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "flash_attn_cuda: q, k, v must be 3-D");
  at::Tensor dq = at::empty(q.sizes(), q.options());
  at::Tensor dk = at::empty(k.sizes(), k.options());
  at::Tensor dv = at::empty(v.sizes(), v.options());
  bwd_varlen_into(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, dq, dk, dv, max_seqlen_q, max_seqlen_k,
                  softmax_scale, causal, deterministic, window_left, window_right, softcap, alibi_slopes, dropout_p,
                  rng_state);
  return {dq, dk, dv};
}
#endif

// The keep-mask (batch, nheads, seqlen_q, seqlen_k) bool of the forward call that wrote rng_state with
// this dropout_p (flash::run_dropout_mask): the testing hook behind return_attn_probs.
at::Tensor dropout_mask(const at::Tensor& rng_state, int64_t batch, int64_t nheads, int64_t seqlen_q,
                        int64_t seqlen_k, double dropout_p) {
  TORCH_CHECK(rng_state.is_cuda() && rng_state.scalar_type() == at::kLong && rng_state.numel() == 2 &&
                  rng_state.is_contiguous(),
              "flash_attn_cuda: rng_state must be the forward's int64 (2,) CUDA tensor");
  TORCH_CHECK(batch >= 0 && nheads >= 0 && seqlen_q >= 0 && seqlen_k >= 0 && batch <= 65535 && nheads <= 65535 &&
                  seqlen_q <= flash::kMaxSeqlen && seqlen_k <= flash::kMaxSeqlen,
              "flash_attn_cuda: dropout_mask sizes out of range");
  TORCH_CHECK(dropout_p > 0.0 && dropout_p < 1.0, "flash_attn_cuda: dropout_mask needs dropout_p in (0, 1), got ",
              num(dropout_p));
  const c10::cuda::CUDAGuard device_guard(rng_state.device());
  at::Tensor mask = at::empty({batch, nheads, seqlen_q, seqlen_k}, rng_state.options().dtype(at::kByte));
  flash::FwdParams p;
  fill_dropout(p, dropout_p);
  const cudaError_t err = flash::run_dropout_mask(
      rng_state.data_ptr<int64_t>(), static_cast<int>(batch), static_cast<int>(nheads), static_cast<int>(seqlen_q),
      static_cast<int>(seqlen_k), p.dropout_threshold, mask.data_ptr<uint8_t>(), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "flash_attn_cuda: dropout_mask launch failed: ", cudaGetErrorString(err));
  return mask.to(at::kBool);
}

bool has_backward() {
#ifdef FLASH_ATTN_CUDA_BACKWARD
  return true;
#else
  return false;
#endif
}

bool has_features() {
#ifdef FLASH_ATTN_CUDA_NO_FEATURES
  return false;
#else
  return true;
#endif
}

std::vector<int64_t> compiled_head_dims() {
  std::vector<int64_t> dims;
  for (int d : flash::compiled_head_dims()) { dims.push_back(d); }
  return dims;
}

std::vector<int64_t> sm90_head_dims() {
  std::vector<int64_t> dims;
  for (int d : flash::sm90_head_dims()) { dims.push_back(d); }
  return dims;
}

std::string last_fwd_family() { return last_family; }
std::vector<int64_t> last_fwd_tile() { return last_fwd_tile_desc; }
std::vector<int64_t> last_bwd_tile() {
  const std::lock_guard<std::mutex> lock(last_bwd_tile_mutex);
  return last_bwd_tile_desc;
}
// The family of the last backward's main kernel ("sm80", "sm90"; "" before any): the autograd engine
// runs backwards on its own threads, hence a guarded global, not a thread_local.
std::string last_bwd_family() {
  const std::lock_guard<std::mutex> lock(last_bwd_tile_mutex);
  return last_bwd_family_name;
}
// FLASH_ATTN_CUDA_SMEM_BUDGET as the calls read it now (KB; 0 unset); raises on a bad value.
int64_t smem_budget_setting() { return smem_budget_from_env(); }
bool smem_tiles_compiled() { return flash::kSmemTilesCompiled; }

// FLASH_ATTN_CUDA_FAMILY as the forward reads it now: "auto", "sm80" or "sm90"; raises on a bad value.
std::string fwd_family_setting() { return flash::family_name(family_from_env()); }
bool sm90_by_default() { return flash::kSm90ByDefault; }

// Names as torch spells them ("float16", "bfloat16").
std::vector<std::string> compiled_dtypes() {
  std::vector<std::string> names;
  for (flash::DType t : flash::compiled_dtypes()) {
    names.push_back(t == flash::DType::kFloat16 ? "float16" : "bfloat16");
  }
  return names;
}

// Every tensor op's CPU kernel: one line naming the op and the first CPU tensor argument, instead
// of the dispatcher's list of backends the op has no kernel for.
void refuse_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const auto values = torch::jit::last(*stack, arguments.size());
  std::string name = "a tensor";
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (values[i].isTensor() && values[i].toTensor().is_cpu()) {
      name = arguments[i].name();
      break;
    }
  }
  TORCH_CHECK(false, op.schema().name(), ": expected CUDA tensors, got ", name, " on cpu");
}

}  // namespace flash_binding

using namespace flash_binding;

TORCH_LIBRARY(flash_attn_cuda, m) {
  m.def("fwd(Tensor q, Tensor k, Tensor v, float softmax_scale, bool causal, bool deterministic=False, "
        "int window_left=-1, int window_right=-1, float softcap=0.0, Tensor? alibi_slopes=None, "
        "float dropout_p=0.0) -> (Tensor out, Tensor lse, Tensor rng_state)");
  m.def("fwd_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, "
        "int max_seqlen_k, float softmax_scale, bool causal, bool deterministic=False, int window_left=-1, "
        "int window_right=-1, float softcap=0.0, Tensor? alibi_slopes=None, float dropout_p=0.0) "
        "-> (Tensor out, Tensor lse, Tensor rng_state)");
  m.def("dropout_mask(Tensor rng_state, int batch, int nheads, int seqlen_q, int seqlen_k, float dropout_p) "
        "-> Tensor");
  m.def("compiled_head_dims() -> int[]", &compiled_head_dims);
  m.def("compiled_dtypes() -> str[]", &compiled_dtypes);
  m.def("has_backward() -> bool", &has_backward);
  m.def("has_features() -> bool", &has_features);
  m.def("sm90_head_dims() -> int[]", &sm90_head_dims);
  m.def("last_fwd_family() -> str", &last_fwd_family);
  m.def("last_fwd_tile() -> int[]", &last_fwd_tile);
  m.def("last_bwd_tile() -> int[]", &last_bwd_tile);
  m.def("last_bwd_family() -> str", &last_bwd_family);
  m.def("smem_budget_setting() -> int", &smem_budget_setting);
  m.def("smem_tiles_compiled() -> bool", &smem_tiles_compiled);
  m.def("fwd_family_setting() -> str", &fwd_family_setting);
  m.def("sm90_by_default() -> bool", &sm90_by_default);
#ifdef FLASH_ATTN_CUDA_BACKWARD
  m.def("bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, float softmax_scale, bool causal, "
        "bool deterministic=False, int window_left=-1, int window_right=-1, float softcap=0.0, "
        "Tensor? alibi_slopes=None, float dropout_p=0.0, Tensor? rng_state=None) -> (Tensor dq, Tensor dk, Tensor dv)");
  m.def("bwd_varlen(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens_q, "
        "Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float softmax_scale, bool causal, "
        "bool deterministic=False, int window_left=-1, int window_right=-1, float softcap=0.0, "
        "Tensor? alibi_slopes=None, float dropout_p=0.0, Tensor? rng_state=None) -> (Tensor dq, Tensor dk, Tensor dv)");
  // The same backwards writing into caller-given gradients (e.g. views into one packed dqkv).
  m.def("bwd_into(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor(a!) dq, Tensor(b!) dk, "
        "Tensor(c!) dv, float softmax_scale, bool causal, bool deterministic=False, int window_left=-1, "
        "int window_right=-1, float softcap=0.0, Tensor? alibi_slopes=None, float dropout_p=0.0, "
        "Tensor? rng_state=None) -> ()");
  m.def("bwd_varlen_into(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens_q, "
        "Tensor cu_seqlens_k, Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv, int max_seqlen_q, int max_seqlen_k, "
        "float softmax_scale, bool causal, bool deterministic=False, int window_left=-1, int window_right=-1, "
        "float softcap=0.0, Tensor? alibi_slopes=None, float dropout_p=0.0, Tensor? rng_state=None) -> ()");
#endif
}

TORCH_LIBRARY_IMPL(flash_attn_cuda, CUDA, m) {
  m.impl("fwd", &fwd);
  m.impl("fwd_varlen", &fwd_varlen);
  m.impl("dropout_mask", &dropout_mask);
#ifdef FLASH_ATTN_CUDA_BACKWARD
  m.impl("bwd", &bwd);
  m.impl("bwd_varlen", &bwd_varlen);
  m.impl("bwd_into", &bwd_into);
  m.impl("bwd_varlen_into", &bwd_varlen_into);
#endif
}

TORCH_LIBRARY_IMPL(flash_attn_cuda, CPU, m) {
  const auto refuse = [] { return torch::CppFunction::makeFromBoxedFunction<&refuse_cpu>(); };
  m.impl("fwd", refuse());
  m.impl("fwd_varlen", refuse());
  m.impl("dropout_mask", refuse());
#ifdef FLASH_ATTN_CUDA_BACKWARD
  m.impl("bwd", refuse());
  m.impl("bwd_varlen", refuse());
  m.impl("bwd_into", refuse());
  m.impl("bwd_varlen_into", refuse());
#endif
}

// Importing flash_attn_cuda._C runs the static registrations above.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", "flash_attn_cuda kernels (ops live in torch.ops.flash_attn_cuda)", -1, nullptr};
  return PyModule_Create(&module);
}
