/*
 * multi.c -- dynamic shapes (seed 002 §5.4.4), multi-batch (§5.6) and several contexts (§5.3, dup_context,
 * weight sharing, non-blocking runs) with the general API.
 *
 * usage: multi dynamic  MODEL DIR   -- DIR/in_<k>.bin per shape set k (uint8 NHWC) -> DIR/out_<k>.bin
 *        multi contexts MODEL DIR   -- DIR/in_<i>.bin for 3 contexts run on 3 threads -> DIR/out_<i>.bin
 *        multi batch    MODEL DIR   -- DIR/in_0.bin holding every frame of the batch -> DIR/out_0.bin
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rknn_api.h"
#include "read_file.h"

/* inputs_set (uint8 NHWC) -> run (non-blocking + wait when asked) -> outputs_get float -> write */
static int run_once(rknn_context ctx, const char* in_path, const char* out_path, int non_block) {
    size_t size = 0;
    void* data = read_file(in_path, &size);
    if (!data) return -100;
    rknn_input input;
    memset(&input, 0, sizeof(input));
    input.index = 0;
    input.type = RKNN_TENSOR_UINT8;
    input.fmt = RKNN_TENSOR_NHWC;
    input.size = (uint32_t)size;
    input.buf = data;
    int ret = rknn_inputs_set(ctx, 1, &input);
    if (ret < 0) return ret;
    rknn_run_extend run_ext;
    memset(&run_ext, 0, sizeof(run_ext));
    run_ext.non_block = non_block;
    run_ext.timeout_ms = 60000;
    if ((ret = rknn_run(ctx, non_block ? &run_ext : NULL)) < 0) return ret;
    if (non_block && (ret = rknn_wait(ctx, &run_ext)) < 0) return ret;
    rknn_output output;
    memset(&output, 0, sizeof(output));
    output.want_float = 1;
    rknn_output_extend out_ext;
    if ((ret = rknn_outputs_get(ctx, 1, &output, &out_ext)) < 0) return ret;
    FILE* f = fopen(out_path, "wb");
    fwrite(output.buf, 1, output.size, f);
    fclose(f);
    rknn_outputs_release(ctx, 1, &output);
    free(data);
    return 0;
}

typedef struct { rknn_context ctx; char in[4096]; char out[4096]; int ret; int non_block; } job;

static void* worker(void* arg) {
    job* j = (job*)arg;
    j->ret = run_once(j->ctx, j->in, j->out, j->non_block);
    return NULL;
}

int main(int argc, char** argv) {
    if (argc < 4) return 2;
    const char* dir = argv[3];
    char in[4096], out[4096];
    rknn_context ctx;
    int ret = rknn_init(&ctx, argv[2], 0, 0, NULL);
    if (ret < 0) { printf("rknn_init fail! ret=%d\n", ret); return 1; }
    if (strcmp(argv[1], "dynamic") == 0) {
        rknn_input_range range;
        memset(&range, 0, sizeof(range));
        range.index = 0;
        if ((ret = rknn_query(ctx, RKNN_QUERY_INPUT_DYNAMIC_RANGE, &range, sizeof(range))) < 0) return 1;
        printf("name=%s shape_number=%u fmt=%d\n", range.name, range.shape_number, range.fmt);
        for (uint32_t k = 0; k < range.shape_number; k++) {
            rknn_tensor_attr attr;
            memset(&attr, 0, sizeof(attr));
            attr.index = 0;
            rknn_query(ctx, RKNN_QUERY_INPUT_ATTR, &attr, sizeof(attr));
            for (uint32_t d = 0; d < range.n_dims; d++) attr.dims[d] = range.dyn_range[k][d];
            attr.fmt = (rknn_tensor_format)range.fmt;
            if ((ret = rknn_set_input_shapes(ctx, 1, &attr)) < 0) { printf("rknn_set_input_shapes error %d\n", ret); return 1; }
            rknn_tensor_attr cur_in, cur_out;
            memset(&cur_in, 0, sizeof(cur_in));
            memset(&cur_out, 0, sizeof(cur_out));
            rknn_query(ctx, RKNN_QUERY_CURRENT_INPUT_ATTR, &cur_in, sizeof(cur_in));
            rknn_query(ctx, RKNN_QUERY_CURRENT_OUTPUT_ATTR, &cur_out, sizeof(cur_out));
            printf("shape %u: input [%u,%u,%u,%u] output [%u,%u,%u,%u]\n", k, cur_in.dims[0], cur_in.dims[1],
                   cur_in.dims[2], cur_in.dims[3], cur_out.dims[0], cur_out.dims[1], cur_out.dims[2], cur_out.dims[3]);
            snprintf(in, sizeof(in), "%s/in_%u.bin", dir, k);
            snprintf(out, sizeof(out), "%s/out_%u.bin", dir, k);
            if ((ret = run_once(ctx, in, out, 0)) < 0) { printf("run fail %d\n", ret); return 1; }
        }
        rknn_tensor_attr bad;
        memset(&bad, 0, sizeof(bad));
        bad.n_dims = 4;
        bad.dims[0] = 1; bad.dims[1] = 5; bad.dims[2] = 5; bad.dims[3] = 3;
        bad.fmt = RKNN_TENSOR_NHWC;
        printf("unknown shape: %d\n", rknn_set_input_shapes(ctx, 1, &bad));
    } else if (strcmp(argv[1], "contexts") == 0) {
        rknn_context dup, shared;
        if ((ret = rknn_dup_context(&ctx, &dup)) < 0) { printf("rknn_dup_context fail %d\n", ret); return 1; }
        rknn_init_extend ext;
        memset(&ext, 0, sizeof(ext));
        ext.ctx = ctx;
        if ((ret = rknn_init(&shared, argv[2], 0, RKNN_FLAG_SHARE_WEIGHT_MEM, &ext)) < 0) {
            printf("rknn_init share fail %d\n", ret);
            return 1;
        }
        printf("core mask 0_1_2: %d, core mask 8: %d, batch core num 3: %d\n",
               rknn_set_core_mask(ctx, RKNN_NPU_CORE_0_1_2), rknn_set_core_mask(dup, (rknn_core_mask)8),
               rknn_set_batch_core_num(shared, 3));
        job jobs[3];
        pthread_t threads[3];
        rknn_context all[3] = {ctx, dup, shared};
        for (int i = 0; i < 3; i++) {
            jobs[i].ctx = all[i];
            jobs[i].non_block = i == 2;
            snprintf(jobs[i].in, sizeof(jobs[i].in), "%s/in_%d.bin", dir, i);
            snprintf(jobs[i].out, sizeof(jobs[i].out), "%s/out_%d.bin", dir, i);
            pthread_create(&threads[i], NULL, worker, &jobs[i]);
        }
        for (int i = 0; i < 3; i++) {
            pthread_join(threads[i], NULL);
            if (jobs[i].ret < 0) { printf("context %d failed: %d\n", i, jobs[i].ret); return 1; }
        }
        rknn_destroy(dup);
        rknn_destroy(shared);
        printf("destroyed twice, then query: %d\n", rknn_query(dup, RKNN_QUERY_IN_OUT_NUM, &ret, 8));
    } else {
        rknn_tensor_attr attr;
        memset(&attr, 0, sizeof(attr));
        rknn_query(ctx, RKNN_QUERY_INPUT_ATTR, &attr, sizeof(attr));
        printf("batch input dims [%u,%u,%u,%u] size %u\n", attr.dims[0], attr.dims[1], attr.dims[2], attr.dims[3],
               attr.size);
        snprintf(in, sizeof(in), "%s/in_0.bin", dir);
        snprintf(out, sizeof(out), "%s/out_0.bin", dir);
        if ((ret = run_once(ctx, in, out, 0)) < 0) { printf("run fail %d\n", ret); return 1; }
    }
    rknn_destroy(ctx);
    printf("done\n");
    return 0;
}
