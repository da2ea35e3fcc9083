// Reference competitor for the benchmark: FlashAttention-3's sm90 forward (Dao-AILab/flash-attention,
// hopper/), bf16, head dims 64 / 128 / 256 (dv = d), non-split, non-paged, no softcap, no PackGQA,
// non-varlen, causal or not. Torch-free: built by build.sh into one shared library, called by ctypes.
// Compiled several times: -DFA3REF_HDIM=64|128|256 gives the unit with FA3's kernels of that head
// dim (FA3's own explicit instantiation, as in hopper/instantiations/flash_fwd_hdim*_bf16_sm90.cu);
// without it, the host entry point below. Nothing of FA3 is in this repository.
#include <cstdint>
#include <cuda_runtime.h>

#ifdef FA3REF_HDIM
#include "flash_fwd_launch_template.h"
template void run_mha_fwd_<90, cutlass::bfloat16_t, FA3REF_HDIM, FA3REF_HDIM, false, false, false, false>(
    Flash_fwd_params &params, cudaStream_t stream);
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

// Fills Flash_fwd_params as hopper/flash_api.cpp mha_fwd + set_params_fprop do for this plain case
// (num_splits = 1, pack_gqa = false, no page table / varlen / kv-append / rotary / qv / descale), then
// calls FA3's launcher. q/k/v/out: (batch, seqlen, heads, d) with unit stride on d; lse: (batch,
// nheads, seqlen_q) float32. semaphore: one device int32, zeroed here (cudaMemsetAsync) before the
// causal launch, as mha_fwd zeroes its tile_count_semaphore for the dynamic persistent scheduler.
FA3REF_API int fa3ref_fwd(void *q, void *k, void *v, void *out, float *lse, int *semaphore,
                          int batch, int seqlen_q, int seqlen_k, int nheads, int nheads_k, int headdim,
                          int64_t q_batch_stride, int64_t q_row_stride, int64_t q_head_stride,
                          int64_t k_batch_stride, int64_t k_row_stride, int64_t k_head_stride,
                          int64_t v_batch_stride, int64_t v_row_stride, int64_t v_head_stride,
                          int64_t o_batch_stride, int64_t o_row_stride, int64_t o_head_stride,
                          float softmax_scale, int causal, int num_sm, void *stream_) {
    if (headdim != 64 && headdim != 128 && headdim != 256) { return FA3REF_BAD_HEADDIM; }
    if (batch <= 0 || seqlen_q <= 0 || seqlen_k <= 0 || nheads <= 0 || nheads_k <= 0 || nheads % nheads_k != 0) {
        return FA3REF_BAD_SHAPE;
    }
    cudaStream_t stream = static_cast<cudaStream_t>(stream_);
    // FA3's launcher exit()s when a CUDA call fails (cuda_check.h): what can fail before it is asked here.
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess && num_sm <= 0) {  // mha_fwd: multiProcessorCount - sm_margin (0)
        e = cudaDeviceGetAttribute(&num_sm, cudaDevAttrMultiProcessorCount, dev);
    }
    if (e != cudaSuccess) { return e; }

    // mha_fwd's window handling: window (-1, -1); seqlen_q == 1 turns causal off (non-paged);
    // causal sets window_size_right = 0. set_params_fprop then derives is_causal / is_local and
    // replaces negative windows by seqlen_k - 1 / seqlen_q - 1.
    bool is_causal = causal != 0 && seqlen_q != 1;
    int window_left = -1, window_right = is_causal ? 0 : -1;

    Flash_fwd_params params = {};
    params.is_bf16 = true;
    params.is_e4m3 = false;
    params.q_ptr = q; params.k_ptr = k; params.v_ptr = v; params.o_ptr = out;
    params.q_batch_stride = q_batch_stride; params.q_row_stride = q_row_stride; params.q_head_stride = q_head_stride;
    params.k_batch_stride = k_batch_stride; params.k_row_stride = k_row_stride; params.k_head_stride = k_head_stride;
    params.v_batch_stride = v_batch_stride; params.v_row_stride = v_row_stride; params.v_head_stride = v_head_stride;
    params.v_dim_stride = 1;
    params.o_batch_stride = o_batch_stride; params.o_row_stride = o_row_stride; params.o_head_stride = o_head_stride;
    params.softmax_lse_ptr = lse;
    params.b = batch; params.b_k = batch;
    params.h = nheads; params.h_k = nheads_k;
    params.seqlen_q = seqlen_q; params.seqlen_k = seqlen_k;
    params.seqlen_q_rounded = (seqlen_q + 127) / 128 * 128;
    params.seqlen_k_rounded = (seqlen_k + 127) / 128 * 128;
    params.d = headdim; params.d_rounded = headdim;    // round_up_headdim: 64 / 128 / 256 are exact
    params.dv = headdim; params.dv_rounded = headdim;
    params.total_q = batch * seqlen_q; params.total_k = batch * seqlen_k;
    params.scale_softmax = softmax_scale;
    params.softcap = 0.f;
    params.p_dropout = 1.f; params.p_dropout_in_uint8_t = 255; params.rp_dropout = 1.f;  // p_dropout = 0
    params.is_causal = window_left < 0 && window_right == 0;
    params.is_local = false;
    params.window_size_left = seqlen_k - 1;
    params.window_size_right = window_right < 0 ? seqlen_q - 1 : window_right;
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
    // sm90: the dynamic persistent scheduler (an atomic tile counter) runs causal / local with one split.
    bool const needs_semaphore = params.is_causal || params.is_local;
    if (needs_semaphore) {
        if (semaphore == nullptr) { return FA3REF_NO_SEMAPHORE; }
        e = cudaMemsetAsync(semaphore, 0, sizeof(int), stream);
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
#endif
