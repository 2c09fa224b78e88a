/* A stand-in for Rockchip's librknnrt.so, built by tests/runtime/test_librknnrt.py with the system C compiler.
 * It implements the functions of openrknn's rknn_api.h (openrknn/codegen/templates/include, the documented
 * structures and signatures) and computes, for a model
 * with one 1x4x4x3 uint8 NHWC input:  out0 (float32) = x*2+1;  out1 (int8, affine scale 4, zp -128) = q(x*2+1).
 * It counts its allocations so the test can check that rknn_outputs_release / rknn_destroy free everything.
 * Build switches: -DAPI_VERSION="..." (default "2.3.0 (fake)"), -DOMIT_CORE_MASK (drop rknn_set_core_mask). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rknn_api.h"

#ifndef API_VERSION
#define API_VERSION "2.3.0 (fake@2026-11-23)"
#endif

enum { N = 48, H = 4, W = 4, C = 3 };
typedef struct {
    uint32_t flags; int have_input, ran; float x[N]; uint64_t frames; int fail_run; int core_mask;
} fake_ctx;

static long live_allocations, calls_release, calls_destroy, last_input_type = -1, last_input_fmt = -1;
static void *track_alloc(size_t n) { live_allocations++; return calloc(1, n); }
static void track_free(void *p) { if (p) { live_allocations--; free(p); } }

/* for the test: outstanding allocations, call counters, and the compiler's layout of every structure */
long fake_live_allocations(void) { return live_allocations; }
long fake_counter(const char *name) {
    if (!strcmp(name, "release")) return calls_release;
    if (!strcmp(name, "destroy")) return calls_destroy;
    if (!strcmp(name, "input_type")) return last_input_type;
    if (!strcmp(name, "input_fmt")) return last_input_fmt;
    return -1;
}
#define F(S, f) if (!strcmp(name, #S "." #f)) return (long)offsetof(S, f);
#define S(S) if (!strcmp(name, #S)) return (long)sizeof(S);
long fake_layout(const char *name) {
    S(rknn_input_output_num) F(rknn_input_output_num, n_input) F(rknn_input_output_num, n_output)
    S(rknn_tensor_attr) F(rknn_tensor_attr, index) F(rknn_tensor_attr, n_dims) F(rknn_tensor_attr, dims)
    F(rknn_tensor_attr, name) F(rknn_tensor_attr, n_elems) F(rknn_tensor_attr, size) F(rknn_tensor_attr, fmt)
    F(rknn_tensor_attr, type) F(rknn_tensor_attr, qnt_type) F(rknn_tensor_attr, fl) F(rknn_tensor_attr, zp)
    F(rknn_tensor_attr, scale) F(rknn_tensor_attr, w_stride) F(rknn_tensor_attr, size_with_stride)
    F(rknn_tensor_attr, pass_through) F(rknn_tensor_attr, h_stride)
    S(rknn_perf_detail) F(rknn_perf_detail, perf_data) F(rknn_perf_detail, data_len)
    S(rknn_perf_run) F(rknn_perf_run, run_duration)
    S(rknn_sdk_version) F(rknn_sdk_version, api_version) F(rknn_sdk_version, drv_version)
    S(rknn_mem_size) F(rknn_mem_size, total_weight_size) F(rknn_mem_size, total_internal_size)
    F(rknn_mem_size, total_dma_allocated_size) F(rknn_mem_size, total_sram_size) F(rknn_mem_size, free_sram_size)
    F(rknn_mem_size, reserved)
    S(rknn_custom_string) F(rknn_custom_string, string)
    S(rknn_input) F(rknn_input, index) F(rknn_input, buf) F(rknn_input, size) F(rknn_input, pass_through)
    F(rknn_input, type) F(rknn_input, fmt)
    S(rknn_output) F(rknn_output, want_float) F(rknn_output, is_prealloc) F(rknn_output, index) F(rknn_output, buf)
    F(rknn_output, size)
    S(rknn_output_extend) F(rknn_output_extend, frame_id) S(rknn_context)
    return -1;
}

int rknn_init(rknn_context *context, void *model, uint32_t size, uint32_t flag, rknn_init_extend *extend) {
    (void)extend;
    if (!context || !model || size == 0) return RKNN_ERR_PARAM_INVALID;
    if (size < 4 || memcmp(model, "RKNN", 4) != 0) return RKNN_ERR_MODEL_INVALID;
    if (size >= 12 && memcmp((char *)model + 4, "BADCHIP", 7) == 0) return RKNN_ERR_TARGET_PLATFORM_UNMATCH;
    fake_ctx *ctx = track_alloc(sizeof(fake_ctx));
    ctx->flags = flag;
    ctx->fail_run = size >= 11 && memcmp((char *)model + 4, "FAILRUN", 7) == 0;
    *context = (rknn_context)(uintptr_t)ctx;
    return 0;
}

int rknn_destroy(rknn_context context) {
    calls_destroy++;
    if (!context) return RKNN_ERR_CTX_INVALID;
    track_free((void *)(uintptr_t)context);
    return 0;
}

static void describe(rknn_tensor_attr *a, int output) {
    uint32_t idx = a->index;
    memset(a, 0, sizeof(*a));
    a->index = idx; a->n_dims = 4; a->dims[0] = 1; a->dims[1] = H; a->dims[2] = W; a->dims[3] = C;
    a->n_elems = N; a->fmt = 1; a->w_stride = W; a->size_with_stride = N;
    if (!output) { strcpy(a->name, "images"); a->type = 3; a->size = N; a->qnt_type = 2; a->scale = 1.0f; return; }
    if (idx == 0) { strcpy(a->name, "out_float"); a->type = 0; a->size = 4 * N; return; }
    strcpy(a->name, "out_int8"); a->type = 2; a->size = N; a->qnt_type = 2; a->zp = -128; a->scale = 4.0f;
}

int rknn_query(rknn_context context, rknn_query_cmd cmd, void *info, uint32_t size) {
    fake_ctx *ctx = (fake_ctx *)(uintptr_t)context;
    static char perf_text[] = "ID  OpType  Time(us)\n1   Conv    42\nTotal Operator Elapsed Time(us): 42\n";
    if (!ctx) return RKNN_ERR_CTX_INVALID;
    if (!info) return RKNN_ERR_PARAM_INVALID;
    const int bad = RKNN_ERR_PARAM_INVALID;   /* a wrong size: the caller's structure is not ours */
    switch (cmd) {
    case RKNN_QUERY_IN_OUT_NUM:
        if (size != sizeof(rknn_input_output_num)) return bad;
        ((rknn_input_output_num *)info)->n_input = 1; ((rknn_input_output_num *)info)->n_output = 2; return 0;
    case RKNN_QUERY_INPUT_ATTR: case RKNN_QUERY_OUTPUT_ATTR:
        if (size != sizeof(rknn_tensor_attr)) return bad;
        if (((rknn_tensor_attr *)info)->index >= (cmd == RKNN_QUERY_INPUT_ATTR ? 1u : 2u)) return bad;
        describe(info, cmd == RKNN_QUERY_OUTPUT_ATTR); return 0;
    case RKNN_QUERY_PERF_DETAIL:
        if (size != sizeof(rknn_perf_detail) || !(ctx->flags & RKNN_FLAG_COLLECT_PERF_MASK) || !ctx->ran) return bad;
        ((rknn_perf_detail *)info)->perf_data = perf_text;
        ((rknn_perf_detail *)info)->data_len = strlen(perf_text); return 0;
    case RKNN_QUERY_PERF_RUN:
        if (size != sizeof(rknn_perf_run) || !ctx->ran) return bad;
        ((rknn_perf_run *)info)->run_duration = 1234; return 0;
    case RKNN_QUERY_SDK_VERSION:
        if (size != sizeof(rknn_sdk_version)) return bad;
        strcpy(((rknn_sdk_version *)info)->api_version, API_VERSION);
        strcpy(((rknn_sdk_version *)info)->drv_version, "0.9.8"); return 0;
    case RKNN_QUERY_MEM_SIZE:
        if (size != sizeof(rknn_mem_size)) return bad;
        memset(info, 0, size);
        ((rknn_mem_size *)info)->total_weight_size = 3 * 1024 * 1024;
        ((rknn_mem_size *)info)->total_internal_size = 1536 * 1024;
        ((rknn_mem_size *)info)->total_dma_allocated_size = 5ull * 1024 * 1024;
        ((rknn_mem_size *)info)->free_sram_size = 7; return 0;
    case RKNN_QUERY_CUSTOM_STRING:
        if (size != sizeof(rknn_custom_string)) return bad;
        strcpy(((rknn_custom_string *)info)->string, "fake model v1"); return 0;
    default: return RKNN_ERR_PARAM_INVALID;
    }
}

#ifndef OMIT_CORE_MASK
int rknn_set_core_mask(rknn_context context, rknn_core_mask mask) {
    fake_ctx *ctx = (fake_ctx *)(uintptr_t)context;
    if (!ctx) return RKNN_ERR_CTX_INVALID;
    switch (mask) {
    case RKNN_NPU_CORE_AUTO: case RKNN_NPU_CORE_0: case RKNN_NPU_CORE_1: case RKNN_NPU_CORE_2:
    case RKNN_NPU_CORE_0_1: case RKNN_NPU_CORE_0_1_2: case RKNN_NPU_CORE_ALL: break;
    default: return RKNN_ERR_PARAM_INVALID;
    }
    ctx->core_mask = mask;
    return 0;
}
#endif

int rknn_inputs_set(rknn_context context, uint32_t n, rknn_input inputs[]) {
    fake_ctx *ctx = (fake_ctx *)(uintptr_t)context;
    if (!ctx) return RKNN_ERR_CTX_INVALID;
    if (n != 1 || !inputs || inputs[0].index != 0 || !inputs[0].buf) return RKNN_ERR_PARAM_INVALID;
    rknn_input *in = &inputs[0];
    int type = in->pass_through ? 3 : in->type, fmt = in->pass_through ? 1 : in->fmt;
    last_input_type = type; last_input_fmt = fmt;
    if ((type != 0 && type != 3) || (fmt != 0 && fmt != 1)) return RKNN_ERR_INPUT_INVALID;
    if (in->size != (type == 0 ? 4u : 1u) * N) return RKNN_ERR_INPUT_INVALID;
    for (int h = 0; h < H; h++) for (int w = 0; w < W; w++) for (int c = 0; c < C; c++) {
        int src = fmt == 1 ? (h * W + w) * C + c : (c * H + h) * W + w;
        ctx->x[(h * W + w) * C + c] = type == 0 ? ((float *)in->buf)[src] : ((uint8_t *)in->buf)[src];
    }
    ctx->have_input = 1;
    return 0;
}

int rknn_run(rknn_context context, rknn_run_extend *extend) {
    fake_ctx *ctx = (fake_ctx *)(uintptr_t)context;
    (void)extend;
    if (!ctx) return RKNN_ERR_CTX_INVALID;
    if (!ctx->have_input) return RKNN_ERR_INPUT_INVALID;
    if (ctx->fail_run) return RKNN_ERR_FAIL;
    ctx->ran = 1; ctx->frames++;
    return 0;
}

int rknn_outputs_get(rknn_context context, uint32_t n, rknn_output outputs[], rknn_output_extend *extend) {
    fake_ctx *ctx = (fake_ctx *)(uintptr_t)context;
    if (!ctx) return RKNN_ERR_CTX_INVALID;
    if (!ctx->ran) return RKNN_ERR_OUTPUT_INVALID;
    if (n != 2 || !outputs) return RKNN_ERR_PARAM_INVALID;
    for (uint32_t k = 0; k < n; k++) {
        rknn_output *o = &outputs[k];
        if (o->index > 1 || o->is_prealloc) return RKNN_ERR_PARAM_INVALID;
        int as_float = o->index == 0 || o->want_float;
        o->size = (as_float ? 4 : 1) * N;
        o->buf = track_alloc(o->size);
        for (int i = 0; i < N; i++) {
            float y = ctx->x[i] * 2.0f + 1.0f;
            if (o->index == 0) { ((float *)o->buf)[i] = y; continue; }
            float q = roundf(y / 4.0f) - 128.0f;
            q = q < -128.0f ? -128.0f : q > 127.0f ? 127.0f : q;
            if (as_float) ((float *)o->buf)[i] = (q + 128.0f) * 4.0f; else ((int8_t *)o->buf)[i] = (int8_t)q;
        }
    }
    if (extend) extend->frame_id = ctx->frames;
    return 0;
}

int rknn_outputs_release(rknn_context context, uint32_t n, rknn_output outputs[]) {
    calls_release++;
    if (!context) return RKNN_ERR_CTX_INVALID;
    for (uint32_t k = 0; k < n; k++) { track_free(outputs[k].buf); outputs[k].buf = NULL; }
    return 0;
}
