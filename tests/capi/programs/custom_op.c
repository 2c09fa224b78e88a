/*
 * custom_op.c -- a CPU custom operator registered as seed 002 §5.5.4 shows: y = alpha * max(x, 0),
 * alpha read from the node with rknn_custom_op_get_op_attr; then the general API runs the model.
 *
 * usage: custom_op MODEL INPUT.bin(float32 NHWC) OUT.bin [gpu]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rknn_api.h"
#include "rknn_custom_op.h"

static int g_prepared = 0;

static int relu_init(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs, uint32_t n_inputs,
                     rknn_custom_op_tensor* outputs, uint32_t n_outputs) {
    int* calls = (int*)malloc(sizeof(int));
    *calls = 0;
    op_ctx->priv_data = calls;
    printf("init: %u input(s) [%u,%u,%u,%u] fmt=%d type=%d, %u output(s)\n", n_inputs, inputs[0].attr.dims[0],
           inputs[0].attr.dims[1], inputs[0].attr.dims[2], inputs[0].attr.dims[3], inputs[0].attr.fmt,
           inputs[0].attr.type, n_outputs);
    (void)outputs;
    return 0;
}

static int relu_prepare(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs, uint32_t n_inputs,
                        rknn_custom_op_tensor* outputs, uint32_t n_outputs) {
    (void)op_ctx; (void)inputs; (void)n_inputs; (void)outputs; (void)n_outputs;
    g_prepared++;
    return 0;
}

static int relu_compute(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs, uint32_t n_inputs,
                        rknn_custom_op_tensor* outputs, uint32_t n_outputs) {
    (void)n_inputs; (void)n_outputs;
    rknn_custom_op_attr alpha;
    rknn_custom_op_get_op_attr(op_ctx, "alpha", &alpha);
    if (alpha.dtype != RKNN_TENSOR_FLOAT32 || alpha.n_elems != 1) return -1;
    float a = *(float*)alpha.data;
    const float* in = (const float*)((char*)inputs[0].mem.virt_addr + inputs[0].mem.offset);
    float* out = (float*)((char*)outputs[0].mem.virt_addr + outputs[0].mem.offset);
    for (uint32_t i = 0; i < inputs[0].attr.n_elems; i++) out[i] = a * (in[i] > 0.0f ? in[i] : 0.0f);
    (*(int*)op_ctx->priv_data)++;
    return 0;
}

static int relu_destroy(rknn_custom_op_context* op_ctx) {
    printf("destroy: compute ran %d time(s), prepare %d\n", *(int*)op_ctx->priv_data, g_prepared);
    free(op_ctx->priv_data);
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 4) return 2;
    rknn_context ctx;
    int ret = rknn_init(&ctx, argv[1], 0, 0, NULL);
    if (ret < 0) { printf("rknn_init fail! ret=%d\n", ret); return 1; }
    rknn_custom_op user_op[1];
    memset(user_op, 0, sizeof(user_op));
    strncpy(user_op[0].op_type, "cstScaledRelu", RKNN_MAX_NAME_LEN - 1);
    user_op[0].version = 1;
    user_op[0].target = (argc > 4 && strcmp(argv[4], "gpu") == 0) ? RKNN_TARGET_TYPE_GPU : RKNN_TARGET_TYPE_CPU;
    user_op[0].init = relu_init;
    user_op[0].prepare = relu_prepare;
    user_op[0].compute = relu_compute;
    user_op[0].destroy = relu_destroy;
    ret = rknn_register_custom_ops(ctx, user_op, 1);
    if (ret < 0) { printf("rknn_register_custom_ops fail! ret = %d\n", ret); return 3; }

    FILE* f = fopen(argv[2], "rb");
    float input[1 * 8 * 8 * 3];
    if (!f || fread(input, sizeof(input), 1, f) != 1) return 1;
    fclose(f);
    rknn_input inputs[1];
    memset(inputs, 0, sizeof(inputs));
    inputs[0].index = 0;
    inputs[0].type = RKNN_TENSOR_FLOAT32;
    inputs[0].fmt = RKNN_TENSOR_NHWC;
    inputs[0].size = sizeof(input);
    inputs[0].buf = input;
    rknn_output outputs[1];
    for (int frame = 0; frame < 2; frame++) {
        if ((ret = rknn_inputs_set(ctx, 1, inputs)) < 0 || (ret = rknn_run(ctx, NULL)) < 0) {
            printf("run fail! ret=%d\n", ret);
            return 1;
        }
        memset(outputs, 0, sizeof(outputs));
        outputs[0].want_float = 1;
        if ((ret = rknn_outputs_get(ctx, 1, outputs, NULL)) < 0) { printf("outputs_get fail %d\n", ret); return 1; }
        if (frame == 1) {
            FILE* o = fopen(argv[3], "wb");
            fwrite(outputs[0].buf, 1, outputs[0].size, o);
            fclose(o);
        }
        rknn_outputs_release(ctx, 1, outputs);
    }
    rknn_destroy(ctx);
    return 0;
}
