// The KV-cache op (flash-attn's flash_attn_with_kvcache): tensors -> KvCacheParams, scratch, launch.
// Torch side, like binding.cpp, whose checks and option handling it shares (binding_common.h).
// Compiled only with FLASH_ATTN_CUDA_KVCACHE=1 (setup.py); the op is then registered here.
#include "binding_common.h"
#include "heuristics.h"

namespace flash_binding {
namespace {

// An optional int32 vector of the batch (cache_seqlens, cache_batch_idx, cache_leftpad), on q's device.
const int* batch_vector(const std::optional<at::Tensor>& t, const at::Tensor& q, int64_t batch, const char* name) {
  if (!t.has_value()) { return nullptr; }
  TORCH_CHECK(t->scalar_type() == at::kInt && t->dim() == 1 && t->size(0) == batch && t->is_contiguous() &&
                  t->device() == q.device(),
              "flash_attn_cuda: ", name, " must be a contiguous int32 (batch,) tensor on q's device");
  return t->data_ptr<int>();
}

// The cache and its addressing: contiguous (batch_cache, seqlen_cache, nheads_k, d) or paged
// (num_pages, page_size, nheads_k, d) through block_table (batch, max_pages) int32.
void fill_cache(flash::KvCacheParams& p, const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                const std::optional<at::Tensor>& block_table, const std::optional<at::Tensor>& cache_batch_idx,
                int64_t batch) {
  check_input(k_cache, "k_cache");
  check_input(v_cache, "v_cache");
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes(), "flash_attn_cuda: k_cache and v_cache must have one shape");
  TORCH_CHECK(k_cache.scalar_type() == q.scalar_type() && v_cache.scalar_type() == q.scalar_type() &&
                  k_cache.device() == q.device() && v_cache.device() == q.device(),
              "flash_attn_cuda: q, k_cache, v_cache must share a dtype and a device");
  p.k_ptr = k_cache.data_ptr();
  p.v_ptr = v_cache.data_ptr();
  set_strides(k_cache, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  set_strides(v_cache, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  p.nheads_k = static_cast<int>(k_cache.size(2));
  p.num_pages = static_cast<int>(k_cache.size(0));  // pages, or cache rows
  if (block_table.has_value()) {
    const at::Tensor& bt = *block_table;
    TORCH_CHECK(bt.scalar_type() == at::kInt && bt.dim() == 2 && bt.size(0) == batch && bt.stride(1) == 1 &&
                    bt.device() == q.device(),
                "flash_attn_cuda: block_table must be int32 (batch, max_pages_per_seq) on q's device with "
                "contiguous rows");
    TORCH_CHECK(!cache_batch_idx.has_value(), "flash_attn_cuda: cache_batch_idx does not apply to a paged cache "
                "(block_table already names each sequence's pages)");
    p.block_table = bt.data_ptr<int>();
    p.block_table_batch_stride = bt.stride(0);
    p.page_size = static_cast<int>(k_cache.size(1));
    for (int shift = 0; shift < 31; ++shift) {
      if ((1 << shift) == p.page_size) { p.page_shift = shift; }
    }
    p.max_pages = static_cast<int>(bt.size(1));
    const int64_t capacity = bt.size(1) * k_cache.size(1);
    TORCH_CHECK(p.page_size > 0 && p.max_pages > 0 && capacity <= flash::kMaxSeqlen,
                "flash_attn_cuda: paged cache: page_size and max_pages_per_seq must be > 0 and their product <= ",
                num(int64_t(flash::kMaxSeqlen)));
    p.seqlen_k = static_cast<int>(capacity);
  } else {
    TORCH_CHECK(cache_batch_idx.has_value() || k_cache.size(0) >= batch, "flash_attn_cuda: k_cache has ",
                num(k_cache.size(0)), " rows for a batch of ", num(batch), "; pass cache_batch_idx");
    TORCH_CHECK(k_cache.size(1) <= flash::kMaxSeqlen, "flash_attn_cuda: seqlen_cache must be <= ",
                num(int64_t(flash::kMaxSeqlen)));
    p.seqlen_k = static_cast<int>(k_cache.size(1));
  }
  p.cache_batch_idx = batch_vector(cache_batch_idx, q, batch, "cache_batch_idx");
}

// New keys/values (batch, seqlen_new, nheads_k, d), appended at cache_seqlens.
void fill_new_kv(flash::KvCacheParams& p, const at::Tensor& q, const std::optional<at::Tensor>& k,
                 const std::optional<at::Tensor>& v, const at::Tensor& k_cache) {
  TORCH_CHECK(k.has_value() == v.has_value(), "flash_attn_cuda: pass both k and v (new tokens) or neither");
  if (!k.has_value()) { return; }
  check_input(*k, "k");
  check_input(*v, "v");
  TORCH_CHECK(k->sizes() == v->sizes() && k->size(0) == q.size(0) && k->size(2) == k_cache.size(2) &&
                  k->size(3) == q.size(3),
              "flash_attn_cuda: k and v must be (batch, seqlen_new, nheads_k, headdim)");
  TORCH_CHECK(k->scalar_type() == q.scalar_type() && v->scalar_type() == q.scalar_type() &&
                  k->device() == q.device() && v->device() == q.device(),
              "flash_attn_cuda: k and v must have q's dtype and device");
  TORCH_CHECK(k->size(1) <= p.seqlen_k, "flash_attn_cuda: ", num(k->size(1)), " new tokens do not fit a cache of ",
              num(int64_t(p.seqlen_k)), " slots");
  p.knew_ptr = k->data_ptr();
  p.vnew_ptr = v->data_ptr();
  set_strides(*k, p.knew_batch_stride, p.knew_row_stride, p.knew_head_stride);
  set_strides(*v, p.vnew_batch_stride, p.vnew_row_stride, p.vnew_head_stride);
  p.seqlen_new = static_cast<int>(k->size(1));
}

// Rotary tables (seqlen_ro, rotary_dim / 2) in q's dtype; q is rotated into a new buffer, returned.
std::optional<at::Tensor> fill_rotary(flash::KvCacheParams& p, const at::Tensor& q,
                                      const std::optional<at::Tensor>& cos, const std::optional<at::Tensor>& sin,
                                      bool interleaved, bool per_token) {
  TORCH_CHECK(cos.has_value() == sin.has_value(), "flash_attn_cuda: pass both rotary_cos and rotary_sin or neither");
  if (!cos.has_value()) { return std::nullopt; }
  TORCH_CHECK(cos->sizes() == sin->sizes() && cos->dim() == 2 && cos->is_contiguous() && sin->is_contiguous() &&
                  cos->scalar_type() == q.scalar_type() && sin->scalar_type() == q.scalar_type() &&
                  cos->device() == q.device() && sin->device() == q.device(),
              "flash_attn_cuda: rotary_cos and rotary_sin must be contiguous (seqlen_ro, rotary_dim / 2) in q's "
              "dtype, on q's device");
  const int64_t rotary_dim = 2 * cos->size(1);
  TORCH_CHECK(rotary_dim > 0 && rotary_dim % 16 == 0 && rotary_dim <= q.size(3) && cos->size(0) > 0,
              "flash_attn_cuda: rotary_dim (2 * rotary_cos.shape[1] = ", num(rotary_dim),
              ") must be a positive multiple of 16 and <= headdim, with seqlen_ro > 0");
  p.rotary_cos_ptr = cos->data_ptr();
  p.rotary_sin_ptr = sin->data_ptr();
  p.rotary_dim = static_cast<int>(rotary_dim);
  p.seqlen_ro = static_cast<int>(cos->size(0));
  p.rotary_interleaved = interleaved;
  p.rotary_per_token = per_token;
  at::Tensor q_rot = at::empty(q.sizes(), q.options());
  p.q_in_ptr = q.data_ptr();
  set_strides(q, p.q_in_batch_stride, p.q_in_row_stride, p.q_in_head_stride);
  p.q_ptr = q_rot.data_ptr();
  set_strides(q_rot, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
  return q_rot;
}

std::tuple<at::Tensor, at::Tensor> fwd_kvcache(
    const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const std::optional<at::Tensor>& k,
    const std::optional<at::Tensor>& v, const std::optional<at::Tensor>& rotary_cos,
    const std::optional<at::Tensor>& rotary_sin, const std::optional<at::Tensor>& cache_seqlens,
    const std::optional<at::Tensor>& cache_batch_idx, const std::optional<at::Tensor>& cache_leftpad,
    const std::optional<at::Tensor>& block_table, double softmax_scale, bool causal, int64_t window_left,
    int64_t window_right, double softcap, bool rotary_interleaved, const std::optional<at::Tensor>& alibi_slopes,
    int64_t num_splits) {
  const Options opt{causal, window_left, window_right, softcap, &alibi_slopes};
  check_input(q, "q");
  const int64_t batch = q.size(0), seqlen_q = q.size(1), nheads = q.size(2), headdim = q.size(3);
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.size(3) == headdim && k_cache.size(2) > 0 &&
                  nheads % k_cache.size(2) == 0,
              "flash_attn_cuda: k_cache must be 4-D with q's head dim and a head count dividing q's");
  TORCH_CHECK(headdim % 8 == 0 && headdim > 0 && headdim <= 256,
              "flash_attn_cuda: head dim must be a multiple of 8 in [8, 256], got ", num(headdim));
  TORCH_CHECK(batch <= 65535 && nheads <= 65535 && seqlen_q <= flash::kMaxSeqlen,
              "flash_attn_cuda: batch and nheads must be <= 65535, seqlen_q <= 2^30");
  TORCH_CHECK(num_splits >= 0 && num_splits <= flash::kMaxSplits, "flash_attn_cuda: num_splits must be in [0, ",
              num(int64_t(flash::kMaxSplits)), "] (0: heuristic), got ", num(num_splits));
  const int headdim_rounded = check_options(q, batch, nheads, headdim, softmax_scale, opt);  // before any allocation

  flash::KvCacheParams p;
  fill_cache(p, q, k_cache, v_cache, block_table, cache_batch_idx, batch);
  p.cache_seqlens = batch_vector(cache_seqlens, q, batch, "cache_seqlens");
  p.cache_leftpad = batch_vector(cache_leftpad, q, batch, "cache_leftpad");
  fill_new_kv(p, q, k, v, k_cache);
  TORCH_CHECK(seqlen_q > 0 || !k.has_value(), "flash_attn_cuda: new k/v need at least one query token (seqlen_q >= 1)");
  TORCH_CHECK(p.cache_seqlens != nullptr || (!k.has_value() && !rotary_cos.has_value()),
              "flash_attn_cuda: new k/v and rotary embeddings need cache_seqlens");

  const c10::cuda::CUDAGuard device_guard(q.device());
  const auto* props = at::cuda::getDeviceProperties(q.get_device());
  TORCH_CHECK(props->major >= 8, "flash_attn_cuda: needs a GPU of compute capability >= 8.0 (Ampere)");
  const int smem = flash::kvcache_shared_memory_bytes(headdim_rounded);
  TORCH_CHECK(smem >= 0 && static_cast<size_t>(smem) <= props->sharedMemPerBlockOptin, "flash_attn_cuda: the "
              "KV-cache kernel for head dim ", num(int64_t(headdim_rounded)), " needs ", num(int64_t(smem / 1024)),
              " KB of shared memory per block; this GPU allows ", num(int64_t(props->sharedMemPerBlockOptin / 1024)),
              " KB");

  at::Tensor out = at::empty(q.sizes(), q.options());
  at::Tensor lse = at::empty({batch, nheads, seqlen_q}, q.options().dtype(at::kFloat));
  if (batch == 0 || seqlen_q == 0 || p.seqlen_k == 0) {  // nothing to attend to
    out.zero_();
    lse.fill_(-std::numeric_limits<float>::infinity());
    return {out, lse};
  }
  p.q_ptr = q.data_ptr();
  p.o_ptr = out.data_ptr();
  p.lse_ptr = lse.data_ptr<float>();
  set_strides(q, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
  set_strides(out, p.o_batch_stride, p.o_row_stride, p.o_head_stride);
  p.batch = static_cast<int>(batch);
  p.seqlen_q = static_cast<int>(seqlen_q);
  p.nheads = static_cast<int>(nheads);
  fill_options(p, q, softmax_scale, opt, headdim_rounded);
  // flash-attn's rule: queries rotate at cache_seqlens + t when causal or local (a window side
  // shorter than the capacity), else all at cache_seqlens.
  const bool local = (window_left >= 0 && window_left < p.seqlen_k) ||
                     (!causal && window_right >= 0 && window_right < p.seqlen_k);
  const std::optional<at::Tensor> q_rot = fill_rotary(p, q, rotary_cos, rotary_sin, rotary_interleaved,
                                                      causal || local);

  p.num_splits = num_splits > 0 ? static_cast<int>(num_splits)
                                : flash::kvcache_num_splits(p, props->multiProcessorCount,
                                                            static_cast<int>(props->sharedMemPerMultiprocessor));
  at::Tensor oaccum, lse_accum;
  if (p.num_splits > 1) {
    const auto f32 = q.options().dtype(at::kFloat);
    oaccum = at::empty({p.num_splits, batch, nheads, seqlen_q, headdim_rounded}, f32);
    lse_accum = at::empty({p.num_splits, batch, nheads, seqlen_q}, f32);
    p.oaccum_ptr = oaccum.data_ptr<float>();
    p.lse_accum_ptr = lse_accum.data_ptr<float>();
  }
  const cudaError_t err = flash::run_kvcache(p, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err != cudaErrorInvalidValue || flash::kvcache_params_supported(p), "flash_attn_cuda: the KV-cache "
              "kernels do not support these sizes or options");
  check_launch(err, p, "KV-cache");
  return {out, lse};
}

// fwd() on dense q, k, v (flash_attn_cuda.attention) as a full, unpaged cache: no append, no rotary.
std::tuple<at::Tensor, at::Tensor> dense_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                 double softmax_scale, const Options& opt) {
  return fwd_kvcache(q, k, v, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
                     std::nullopt, std::nullopt, softmax_scale, opt.causal, opt.window_left, opt.window_right,
                     opt.softcap, true, *opt.alibi_slopes, 0);
}

// fwd_varlen() on packed q (total_q, nheads, d), k/v (total_k, nheads_k, d) when every sequence
// has max_seqlen_q query rows (total_q == batch * max_seqlen_q; the caller checks): the packed keys
// are one cache row that every sequence sees through a broadcast (stride-0) batch, sequence b its
// slots [cu_seqlens_k[b], cu_seqlens_k[b + 1]) as cache_leftpad / cache_seqlens (views of the prefix
// sums, nothing copied or read on the host). Bottom-right causal / window / ALiBi positions count
// from the first visible slot, as varlen's do. lse comes back in varlen's (nheads, total_q) layout.
std::tuple<at::Tensor, at::Tensor> varlen_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                  const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                                  int64_t max_seqlen_q, double softmax_scale, const Options& opt) {
  const int64_t batch = cu_seqlens_q.size(0) - 1, nheads = q.size(1), d = q.size(2);
  const at::Tensor q4 = q.view({batch, max_seqlen_q, nheads, d});                    // (batch, sq, nheads, d)
  const at::Tensor k4 = k.unsqueeze(0).expand({batch, k.size(0), k.size(1), d});     // (batch, total_k, nheads_k, d), stride 0
  const at::Tensor v4 = v.unsqueeze(0).expand({batch, v.size(0), v.size(1), d});
  const at::Tensor leftpad = cu_seqlens_k.narrow(0, 0, batch), ends = cu_seqlens_k.narrow(0, 1, batch);  // (batch,)
  auto [out, lse] = fwd_kvcache(q4, k4, v4, std::nullopt, std::nullopt, std::nullopt, std::nullopt, ends,
                                std::nullopt, leftpad, std::nullopt, softmax_scale, opt.causal, opt.window_left,
                                opt.window_right, opt.softcap, true, *opt.alibi_slopes, 0);
  // out (batch, sq, nheads, d) -> (total_q, nheads, d); lse (batch, nheads, sq) -> (nheads, total_q),
  // contiguous as the varlen backward requires (for sq == 1 the reshape alone is a strided view)
  return {out.view(q.sizes()), lse.permute({1, 0, 2}).reshape({nheads, batch * max_seqlen_q}).contiguous()};
}

// Registers the decode paths with binding.cpp's fwd() / fwd_varlen() when this file is part of the build.
const bool registered =
    (decode_forward = {&dense_forward, &varlen_forward, &flash::kvcache_shared_memory_bytes}, true);

}  // namespace
}  // namespace flash_binding

TORCH_LIBRARY_FRAGMENT(flash_attn_cuda, m) {
  m.def("fwd_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, Tensor? v, Tensor? rotary_cos, "
        "Tensor? rotary_sin, Tensor? cache_seqlens, Tensor? cache_batch_idx, Tensor? cache_leftpad, "
        "Tensor? block_table, float softmax_scale, bool causal, int window_left, int window_right, float softcap, "
        "bool rotary_interleaved, Tensor? alibi_slopes, int num_splits) -> (Tensor out, Tensor lse)");
}

TORCH_LIBRARY_IMPL(flash_attn_cuda, CUDA, m) { m.impl("fwd_kvcache", &flash_binding::fwd_kvcache); }

TORCH_LIBRARY_IMPL(flash_attn_cuda, CPU, m) {
  m.impl("fwd_kvcache", torch::CppFunction::makeFromBoxedFunction<&flash_binding::refuse_cpu>());
}
