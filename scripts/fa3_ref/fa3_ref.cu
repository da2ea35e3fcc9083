// Reference competitor for the benchmark: FlashAttention-3's sm90 forward and backward
// (Dao-AILab/flash-attention, hopper/), bf16, head dims 64 / 128 / 256 (dv = d), non-split, non-paged,
// no softcap, no PackGQA, non-varlen, causal or not. Torch-free: built by build.sh into one shared
// library, called by ctypes. Compiled several times: -DFA3REF_HDIM=64|128|256 gives the unit with FA3's
// forward kernels of that head dim (FA3's own explicit instantiation, as in
// hopper/instantiations/flash_fwd_hdim*_bf16_sm90.cu), -DFA3REF_BWD_HDIM=... its backward kernels (as in
// flash_bwd_hdim*_bf16_sm90.cu); without either, the host entry points below. Nothing of FA3 is in this
// repository.
#include <cstdint>
#include <cuda_runtime.h>

#if defined(FA3REF_HDIM)
#include "flash_fwd_launch_template.h"
template void run_mha_fwd_<90, cutlass::bfloat16_t, FA3REF_HDIM, FA3REF_HDIM, false, false, false, false>(
    Flash_fwd_params &params, cudaStream_t stream);
#elif defined(FA3REF_BWD_HDIM)
#include "flash_bwd_launch_template.h"
template <>
void run_mha_bwd_<90, cutlass::bfloat16_t, FA3REF_BWD_HDIM, false>(Flash_bwd_params &params, cudaStream_t stream) {
#define FA3REF_CAT(a, b) a##b
#define FA3REF_BWD_HDIM_FN(d) FA3REF_CAT(run_mha_bwd_hdim, d)
    FA3REF_BWD_HDIM_FN(FA3REF_BWD_HDIM)<90, cutlass::bfloat16_t, false>(params, stream);
}
#else
#include <cutlass/numeric_types.h>
#include "flash.h"

#define FA3REF_API extern "C" __attribute__((visibility("default")))

// Error codes below 0 are ours; above 0 they are a cudaError_t.
enum { FA3REF_BAD_HEADDIM = -1, FA3REF_BAD_SHAPE = -2, FA3REF_NO_SEMAPHORE = -3 };

FA3REF_API const char *fa3ref_error_string(int code) {
    switch (code) {
        case 0: return "success";
        case FA3REF_BAD_HEADDIM: return "fa3ref: head dim must be 64, 128 or 256";
        case FA3REF_BAD_SHAPE: return "fa3ref: bad shape (sizes must be > 0, nheads % nheads_k == 0)";
        case FA3REF_NO_SEMAPHORE: return "fa3ref: causal needs a device int32 semaphore";
        default: return cudaGetErrorString(static_cast<cudaError_t>(code));
    }
}

// The strides of the (batch, seqlen, heads, d) tensors, unit stride on d, as the entry points take them:
// strides[3 * t + i] for tensor t (q, k, v, out) and i (batch, row, head); dq / dk / dv / dout share
// q's / k's / v's / out's.
enum { kQ = 0, kK = 3, kV = 6, kO = 9, kBatch = 0, kRow = 1, kHead = 2 };

// Fills the Flash_fwd_params part as hopper/flash_api.cpp set_params_fprop does for this plain case
// (num_splits = 1, pack_gqa = false, no page table / varlen / kv-append / rotary / qv / descale), with
// mha_fwd's / mha_bwd's window handling: window (-1, -1); causal sets window_size_right = 0; negative
// windows become seqlen_k - 1 / seqlen_q - 1 (the callers pass is_causal: mha_fwd turns causal off at
// seqlen_q == 1 for a non-paged cache, mha_bwd does not).
// seqlen_{q,k}_rounded: the forward rounds to 128, the backward to its kBlockM / kBlockN.
static void fill_fprop(Flash_fwd_params &params, void *q, void *k, void *v, void *out, float *lse,
                       int batch, int seqlen_q, int seqlen_k, int seqlen_q_rounded, int seqlen_k_rounded,
                       int nheads, int nheads_k, int headdim, const int64_t *st, float softmax_scale,
                       bool is_causal, int num_sm) {
    params.is_bf16 = true;
    params.is_e4m3 = false;
    params.q_ptr = q; params.k_ptr = k; params.v_ptr = v; params.o_ptr = out;
    params.q_batch_stride = st[kQ + kBatch]; params.q_row_stride = st[kQ + kRow]; params.q_head_stride = st[kQ + kHead];
    params.k_batch_stride = st[kK + kBatch]; params.k_row_stride = st[kK + kRow]; params.k_head_stride = st[kK + kHead];
    params.v_batch_stride = st[kV + kBatch]; params.v_row_stride = st[kV + kRow]; params.v_head_stride = st[kV + kHead];
    params.v_dim_stride = 1;
    params.o_batch_stride = st[kO + kBatch]; params.o_row_stride = st[kO + kRow]; params.o_head_stride = st[kO + kHead];
    params.softmax_lse_ptr = lse;
    params.b = batch; params.b_k = batch;
    params.h = nheads; params.h_k = nheads_k;
    params.seqlen_q = seqlen_q; params.seqlen_k = seqlen_k;
    params.seqlen_q_rounded = seqlen_q_rounded;
    params.seqlen_k_rounded = seqlen_k_rounded;
    params.d = headdim; params.d_rounded = headdim;    // round_up_headdim: 64 / 128 / 256 are exact
    params.dv = headdim; params.dv_rounded = headdim;
    params.total_q = batch * seqlen_q; params.total_k = batch * seqlen_k;
    params.scale_softmax = softmax_scale;
    params.softcap = 0.f;
    params.p_dropout = 1.f; params.p_dropout_in_uint8_t = 255; params.rp_dropout = 1.f;  // p_dropout = 0
    params.is_causal = is_causal;
    params.is_local = false;
    params.window_size_left = seqlen_k - 1;
    params.window_size_right = is_causal ? 0 : seqlen_q - 1;
    params.attention_chunk = 0;
    params.rotary_dim = 0;
    params.page_size = 1; params.num_pages = 0; params.pagedkv_tma = false;
    params.num_splits = 1;
    params.pack_gqa = false;
    params.arch = 90;
    params.num_sm = num_sm;
    params.prepare_varlen_pdl = false;
    params.skip_scheduler_metadata_computation = false;
    params.varlen_sort_batches = !params.is_local;
    params.head_swizzle = params.is_causal || params.is_local;
}

// What both entry points check before FA3's launcher (which exit()s when a CUDA call fails,
// cuda_check.h): the shape, and the SM count (num_sm <= 0: the device's, as mha_fwd with sm_margin 0).
static int check_call(int batch, int seqlen_q, int seqlen_k, int nheads, int nheads_k, int headdim, int &num_sm) {
    if (headdim != 64 && headdim != 128 && headdim != 256) { return FA3REF_BAD_HEADDIM; }
    if (batch <= 0 || seqlen_q <= 0 || seqlen_k <= 0 || nheads <= 0 || nheads_k <= 0 || nheads % nheads_k != 0) {
        return FA3REF_BAD_SHAPE;
    }
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess && num_sm <= 0) {
        e = cudaDeviceGetAttribute(&num_sm, cudaDevAttrMultiProcessorCount, dev);
    }
    return static_cast<int>(e);
}

// FA3's forward. q/k/v/out: (batch, seqlen, heads, d) with unit stride on d, their strides in `strides` (kQ ..);
// lse: (batch, nheads, seqlen_q) float32. semaphore: one device int32, zeroed here (cudaMemsetAsync) before the causal
// launch, as mha_fwd zeroes its tile_count_semaphore for the dynamic persistent scheduler.
FA3REF_API int fa3ref_fwd(void *q, void *k, void *v, void *out, float *lse, int *semaphore,
                          int batch, int seqlen_q, int seqlen_k, int nheads, int nheads_k, int headdim,
                          const int64_t *strides,
                          float softmax_scale, int causal, int num_sm, void *stream_) {
    if (int rc = check_call(batch, seqlen_q, seqlen_k, nheads, nheads_k, headdim, num_sm)) { return rc; }
    cudaStream_t stream = static_cast<cudaStream_t>(stream_);
    bool const is_causal = causal != 0 && seqlen_q != 1;
    Flash_fwd_params params = {};
    fill_fprop(params, q, k, v, out, lse, batch, seqlen_q, seqlen_k, (seqlen_q + 127) / 128 * 128,
               (seqlen_k + 127) / 128 * 128, nheads, nheads_k, headdim,
               strides, softmax_scale, is_causal, num_sm);
    // sm90: the dynamic persistent scheduler (an atomic tile counter) runs causal / local with one split.
    if (is_causal) {
        if (semaphore == nullptr) { return FA3REF_NO_SEMAPHORE; }
        cudaError_t e = cudaMemsetAsync(semaphore, 0, sizeof(int), stream);
        if (e != cudaSuccess) { return e; }
        params.tile_count_semaphore = semaphore;
    }
    switch (headdim) {
        case 64: run_mha_fwd_<90, cutlass::bfloat16_t, 64, 64, false, false, false, false>(params, stream); break;
        case 128: run_mha_fwd_<90, cutlass::bfloat16_t, 128, 128, false, false, false, false>(params, stream); break;
        default: run_mha_fwd_<90, cutlass::bfloat16_t, 256, 256, false, false, false, false>(params, stream); break;
    }
    return static_cast<int>(cudaGetLastError());
}

#ifndef FA3REF_NO_BWD  // build.sh BWD=0: no backward kernels in the library, so no entry points for them
// The backward's tile (mha_bwd's kBlockM_sm90 / kBlockN_sm90 without softcap / local): the caller sizes
// the workspaces of fa3ref_bwd with it (seqlen_q rounded to block_m, seqlen_k to block_n).
FA3REF_API int fa3ref_bwd_blocks(int headdim, int causal, int *block_m, int *block_n) {
    if (headdim != 64 && headdim != 128 && headdim != 256) { return FA3REF_BAD_HEADDIM; }
    *block_m = headdim == 64 ? 128 : headdim == 128 ? (causal ? 64 : 80) : 64;
    *block_n = headdim <= 128 ? 128 : 80;
    return 0;
}

// FA3's backward (hopper/flash_api.cpp mha_bwd + set_params_dgrad, non-deterministic). dout/dq/dk/dv
// share the strides of out/q/k/v; lse: the forward's (batch, nheads, seqlen_q) float32. Workspaces
// (device, float32 unless said; R_q / R_k = seqlen_q / seqlen_k rounded up to fa3ref_bwd_blocks):
// softmax_d and lse_log2 (batch, nheads, R_q); dq_accum (batch, nheads, R_q * d); dq_semaphore int32
// (ceil(seqlen_q / block_m), batch, nheads) (zeroed by FA3's preprocess kernel); dk_accum / dv_accum
// (batch, nheads_k, R_k * d), zeroed, only when nheads != nheads_k (else null).
FA3REF_API int fa3ref_bwd(void *dout, void *q, void *k, void *v, void *out, float *lse,
                          void *dq, void *dk, void *dv, float *softmax_d, float *lse_log2, float *dq_accum,
                          int *dq_semaphore, float *dk_accum, float *dv_accum,
                          int batch, int seqlen_q, int seqlen_k, int nheads, int nheads_k, int headdim,
                          const int64_t *strides,
                          float softmax_scale, int causal, int num_sm, void *stream_) {
    if (int rc = check_call(batch, seqlen_q, seqlen_k, nheads, nheads_k, headdim, num_sm)) { return rc; }
    if ((nheads != nheads_k) != (dk_accum != nullptr && dv_accum != nullptr)) { return FA3REF_BAD_SHAPE; }
    bool const is_causal = causal != 0;  // mha_bwd keeps causal at seqlen_q == 1 (mha_fwd turns it off)
    int block_m = 0, block_n = 0;
    fa3ref_bwd_blocks(headdim, is_causal, &block_m, &block_n);
    Flash_bwd_params params = {};
    fill_fprop(params, q, k, v, out, lse, batch, seqlen_q, seqlen_k, (seqlen_q + block_m - 1) / block_m * block_m,
               (seqlen_k + block_n - 1) / block_n * block_n, nheads, nheads_k, headdim,
               strides, softmax_scale, is_causal, num_sm);
    params.do_ptr = dout; params.dq_ptr = dq; params.dk_ptr = dk; params.dv_ptr = dv;
    params.do_batch_stride = params.o_batch_stride; params.do_row_stride = params.o_row_stride;
    params.do_head_stride = params.o_head_stride;
    params.dq_batch_stride = params.q_batch_stride; params.dq_row_stride = params.q_row_stride;
    params.dq_head_stride = params.q_head_stride;
    params.dk_batch_stride = params.k_batch_stride; params.dk_row_stride = params.k_row_stride;
    params.dk_head_stride = params.k_head_stride;
    params.dv_batch_stride = params.v_batch_stride; params.dv_row_stride = params.v_row_stride;
    params.dv_head_stride = params.v_head_stride;
    params.dq_accum_ptr = dq_accum; params.dk_accum_ptr = dk_accum; params.dv_accum_ptr = dv_accum;
    params.dsoftmax_sum = softmax_d;
    params.softmax_lse_log2_ptr = lse_log2;
    params.dq_semaphore = dq_semaphore;
    params.deterministic = false;
    cudaStream_t stream = static_cast<cudaStream_t>(stream_);
    switch (headdim) {
        case 64: run_mha_bwd_<90, cutlass::bfloat16_t, 64, false>(params, stream); break;
        case 128: run_mha_bwd_<90, cutlass::bfloat16_t, 128, false>(params, stream); break;
        default: run_mha_bwd_<90, cutlass::bfloat16_t, 256, false>(params, stream); break;
    }
    return static_cast<int>(cudaGetLastError());
}
#endif  // FA3REF_NO_BWD
#endif
