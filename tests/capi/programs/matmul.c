/*
 * matmul.c -- the matmul API flow of seed 002 §3.5.2, with the guide's layout conversions done here in C.
 *
 * usage: matmul M K N TYPE B_LAYOUT AC_LAYOUT A.bin B.bin C_OUT.bin [sA zpA sB zpB sC zpC]
 *   A.bin [M,K] and B.bin [K,N] in the normal layout (int4: two values per byte, low nibble first);
 *   with NATIVE layouts this program rearranges them itself (and checks rknn_B_normal_layout_to_native_layout
 *   against its own B), and writes C back in the normal [M,N] layout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rknn_matmul_api.h"
#include "read_file.h"

static size_t elem_size(rknn_tensor_type t) {
    switch (t) {
        case RKNN_TENSOR_FLOAT32: case RKNN_TENSOR_INT32: return 4;
        case RKNN_TENSOR_FLOAT16: case RKNN_TENSOR_INT16: return 2;
        default: return 1;
    }
}

/* [rows, cols] -> [cols/sub, rows, sub] (A, and C the other way), zero padded */
static void norm_to_perf(const char* src, char* dst, int rows, int cols, int sub, size_t es) {
    int outer = (cols + sub - 1) / sub;
    for (int i = 0; i < outer; i++)
        for (int m = 0; m < rows; m++)
            for (int k = 0; k < sub; k++) {
                int col = i * sub + k;
                char* d = dst + ((size_t)(i * rows + m) * sub + k) * es;
                if (col < cols) memcpy(d, src + ((size_t)m * cols + col) * es, es);
                else memset(d, 0, es);
            }
}

static void perf_to_norm(const char* src, char* dst, int rows, int cols, int sub, size_t es) {
    int outer = (cols + sub - 1) / sub;
    for (int i = 0; i < outer; i++)
        for (int m = 0; m < rows; m++)
            for (int k = 0; k < sub; k++) {
                int col = i * sub + k;
                if (col < cols) memcpy(dst + ((size_t)m * cols + col) * es, src + ((size_t)(i * rows + m) * sub + k) * es, es);
            }
}

/* [K, N] -> [N/subN, K/subK, subN, subK] (the guide's norm_layout_to_native_layout) */
static void b_norm_to_native(const char* src, char* dst, int K, int N, int subN, int subK, size_t es) {
    int n_remain = (N + subN - 1) / subN, k_remain = (K + subK - 1) / subK;
    for (int i = 0; i < n_remain; i++)
        for (int j = 0; j < k_remain; j++)
            for (int n = 0; n < subN; n++) {
                int ni = i * subN + n;
                for (int k = 0; k < subK; k++) {
                    int ki = j * subK + k;
                    char* d = dst + (((size_t)(i * k_remain + j) * subN + n) * subK + k) * es;
                    if (ki < K && ni < N) memcpy(d, src + ((size_t)ki * N + ni) * es, es);
                    else memset(d, 0, es);
                }
            }
}

static int set_quant(rknn_matmul_ctx ctx, const char* name, float scale, int32_t zp) {
    rknn_quant_params params;
    memset(&params, 0, sizeof(params));
    strncpy(params.name, name, RKNN_MAX_NAME_LEN - 1);
    params.scale = &scale;
    params.scale_len = 1;
    params.zp = &zp;
    params.zp_len = 1;
    return rknn_matmul_set_quant_params(ctx, &params);
}

int main(int argc, char** argv) {
    if (argc < 10) return 2;
    rknn_matmul_info info;
    memset(&info, 0, sizeof(info));
    info.M = atoi(argv[1]);
    info.K = atoi(argv[2]);
    info.N = atoi(argv[3]);
    info.type = (rknn_matmul_type)atoi(argv[4]);
    info.B_layout = (int16_t)atoi(argv[5]);
    info.AC_layout = (int16_t)atoi(argv[6]);
    if (argc >= 16) {   /* zero points given: asymmetric per-layer parameters */
        info.AC_quant_type = RKNN_QUANT_TYPE_PER_LAYER_ASYM;
        info.B_quant_type = RKNN_QUANT_TYPE_PER_LAYER_ASYM;
    }
    rknn_matmul_io_attr io_attr;
    memset(&io_attr, 0, sizeof(io_attr));
    rknn_matmul_ctx ctx;
    int ret = rknn_matmul_create(&ctx, &info, &io_attr);
    if (ret < 0) { printf("rknn_matmul_create fail! ret=%d\n", ret); return 3; }
    printf("type %s\n", get_matmul_type_string(info.type));
    printf("A dims=[%u,%u,%u] B dims=[%u,%u,%u,%u] C dims=[%u,%u,%u] sizes %u %u %u\n", io_attr.A.dims[0],
           io_attr.A.dims[1], io_attr.A.dims[2], io_attr.B.dims[0], io_attr.B.dims[1], io_attr.B.dims[2],
           io_attr.B.dims[3], io_attr.C.dims[0], io_attr.C.dims[1], io_attr.C.dims[2], io_attr.A.size,
           io_attr.B.size, io_attr.C.size);
    if (argc >= 16) {
        if (set_quant(ctx, "A", (float)atof(argv[10]), atoi(argv[11])) < 0 ||
            set_quant(ctx, "B", (float)atof(argv[12]), atoi(argv[13])) < 0 ||
            set_quant(ctx, "C", (float)atof(argv[14]), atoi(argv[15])) < 0) {
            printf("rknn_matmul_set_quant_params fail\n");
            return 1;
        }
    }
    size_t a_len = 0, b_len = 0;
    char* a = (char*)read_file(argv[7], &a_len);
    char* b = (char*)read_file(argv[8], &b_len);
    if (!a || !b) return 1;
    rknn_tensor_mem* A = rknn_create_mem(ctx, io_attr.A.size);
    rknn_tensor_mem* B = rknn_create_mem(ctx, io_attr.B.size);
    rknn_tensor_mem* C = rknn_create_mem(ctx, io_attr.C.size);
    size_t a_es = elem_size(io_attr.A.type), b_es = elem_size(io_attr.B.type), c_es = elem_size(io_attr.C.type);
    if (info.AC_layout == RKNN_MM_LAYOUT_NATIVE)
        norm_to_perf(a, (char*)A->virt_addr, info.M, info.K, (int)io_attr.A.dims[2], a_es);
    else
        memcpy(A->virt_addr, a, a_len);
    if (info.B_layout == RKNN_MM_LAYOUT_NATIVE) {
        b_norm_to_native(b, (char*)B->virt_addr, info.K, info.N, (int)io_attr.B.dims[2], (int)io_attr.B.dims[3], b_es);
        char* check = (char*)calloc(1, io_attr.B.size);
        ret = rknn_B_normal_layout_to_native_layout(b, check, info.K, info.N, &info);
        printf("B native conversion %s\n", ret == 0 && memcmp(check, B->virt_addr, io_attr.B.size) == 0
                                               ? "matches" : "differs");
        free(check);
    } else if (info.B_layout == RKNN_MM_LAYOUT_TP_NORM) {
        for (int k = 0; k < info.K; k++)
            for (int n = 0; n < info.N; n++)
                memcpy((char*)B->virt_addr + ((size_t)n * info.K + k) * b_es, b + ((size_t)k * info.N + n) * b_es, b_es);
    } else {
        memcpy(B->virt_addr, b, b_len);
    }
    if ((ret = rknn_matmul_set_io_mem(ctx, A, &io_attr.A)) < 0 || (ret = rknn_matmul_set_io_mem(ctx, B, &io_attr.B)) < 0 ||
        (ret = rknn_matmul_set_io_mem(ctx, C, &io_attr.C)) < 0) {
        printf("rknn_matmul_set_io_mem fail! ret=%d\n", ret);
        return 1;
    }
    ret = rknn_matmul_run(ctx);
    if (ret < 0) { printf("rknn_matmul_run fail! ret=%d\n", ret); return 1; }
    size_t c_len = (size_t)info.M * info.N * c_es;
    char* c = (char*)malloc(c_len);
    if (info.AC_layout == RKNN_MM_LAYOUT_NATIVE)
        perf_to_norm((char*)C->virt_addr, c, info.M, info.N, (int)io_attr.C.dims[2], c_es);
    else
        memcpy(c, C->virt_addr, c_len);
    FILE* f = fopen(argv[9], "wb");
    fwrite(c, 1, c_len, f);
    fclose(f);
    rknn_destroy_mem(ctx, A);
    rknn_destroy_mem(ctx, B);
    rknn_destroy_mem(ctx, C);
    rknn_matmul_destroy(ctx);
    free(a);
    free(b);
    free(c);
    printf("done\n");
    return 0;
}
