/*
 * general_api.c -- a program written the way Rockchip's SDK documents the general C API (seed 002 §3.3):
 * init -> query attrs -> inputs_set -> run -> outputs_get -> release -> destroy.
 *
 * usage: general_api MODEL INPUT.bin TYPE FMT PASS_THROUGH WANT_FLOAT OUT_PREFIX [path]
 *   TYPE: rknn_tensor_type value of INPUT.bin; FMT: rknn_tensor_format value;
 *   "path" as 8th argument: rknn_init(model path, size 0) instead of the bytes in memory.
 * Prints the attributes; writes OUT_PREFIX<i>.bin per output.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rknn_api.h"
#include "read_file.h"

static void dump_attr(const char* kind, rknn_tensor_attr* a) {
    printf("%s index=%u name=%s n_dims=%u dims=[", kind, a->index, a->name, a->n_dims);
    for (uint32_t i = 0; i < a->n_dims; i++) printf(i ? ",%u" : "%u", a->dims[i]);
    printf("] n_elems=%u size=%u fmt=%d type=%d qnt_type=%d zp=%d scale=%.9g w_stride=%u size_with_stride=%u\n",
           a->n_elems, a->size, a->fmt, a->type, a->qnt_type, a->zp, a->scale, a->w_stride, a->size_with_stride);
    printf("  %s %s %s\n", get_format_string(a->fmt), get_type_string(a->type), get_qnt_type_string(a->qnt_type));
}

int main(int argc, char** argv) {
    if (argc < 8) { fprintf(stderr, "usage: see the file header\n"); return 2; }
    rknn_context ctx = 0;
    int ret;
    size_t model_len = 0;
    unsigned char* model = NULL;
    if (argc > 8 && strcmp(argv[8], "path") == 0) {
        ret = rknn_init(&ctx, argv[1], 0, 0, NULL);
    } else {
        model = (unsigned char*)read_file(argv[1], &model_len);
        if (!model) { fprintf(stderr, "cannot read %s\n", argv[1]); return 1; }
        ret = rknn_init(&ctx, model, (uint32_t)model_len, 0, NULL);
    }
    if (ret < 0) { printf("rknn_init fail! ret=%d\n", ret); return 1; }

    rknn_sdk_version version;
    ret = rknn_query(ctx, RKNN_QUERY_SDK_VERSION, &version, sizeof(rknn_sdk_version));
    if (ret < 0) { printf("rknn_query fail! ret=%d\n", ret); return 1; }
    printf("sdk api=%s driver=%s\n", version.api_version, version.drv_version);

    rknn_input_output_num io_num;
    ret = rknn_query(ctx, RKNN_QUERY_IN_OUT_NUM, &io_num, sizeof(io_num));
    if (ret < 0) { printf("rknn_query fail! ret=%d\n", ret); return 1; }
    printf("n_input=%u n_output=%u\n", io_num.n_input, io_num.n_output);

    rknn_tensor_attr input_attrs[8];
    memset(input_attrs, 0, sizeof(input_attrs));
    for (uint32_t i = 0; i < io_num.n_input; i++) {
        input_attrs[i].index = i;
        ret = rknn_query(ctx, RKNN_QUERY_INPUT_ATTR, &(input_attrs[i]), sizeof(rknn_tensor_attr));
        if (ret < 0) { printf("rknn_query fail! ret=%d\n", ret); return 1; }
        dump_attr("input", &input_attrs[i]);
    }
    rknn_tensor_attr output_attrs[8];
    memset(output_attrs, 0, sizeof(output_attrs));
    for (uint32_t i = 0; i < io_num.n_output; i++) {
        output_attrs[i].index = i;
        ret = rknn_query(ctx, RKNN_QUERY_OUTPUT_ATTR, &(output_attrs[i]), sizeof(rknn_tensor_attr));
        if (ret < 0) { printf("rknn_query fail! ret=%d\n", ret); return 1; }
        dump_attr("output", &output_attrs[i]);
    }
    rknn_custom_string custom;
    memset(&custom, 0, sizeof(custom));
    if (rknn_query(ctx, RKNN_QUERY_CUSTOM_STRING, &custom, sizeof(custom)) == RKNN_SUCC)
        printf("custom_string=%s\n", custom.string);

    size_t input_len = 0;
    unsigned char* input = (unsigned char*)read_file(argv[2], &input_len);
    if (!input) { fprintf(stderr, "cannot read %s\n", argv[2]); return 1; }
    rknn_input inputs[1];
    memset(inputs, 0, sizeof(inputs));
    inputs[0].index = 0;
    inputs[0].type = (rknn_tensor_type)atoi(argv[3]);
    inputs[0].fmt = (rknn_tensor_format)atoi(argv[4]);
    inputs[0].pass_through = (uint8_t)atoi(argv[5]);
    inputs[0].size = (uint32_t)input_len;
    inputs[0].buf = input;
    ret = rknn_inputs_set(ctx, io_num.n_input, inputs);
    if (ret < 0) { printf("rknn_input_set fail! ret=%d\n", ret); return 3; }

    ret = rknn_run(ctx, NULL);
    if (ret < 0) { printf("rknn_run fail! ret=%d\n", ret); return 1; }

    rknn_output outputs[8];
    memset(outputs, 0, sizeof(outputs));
    for (uint32_t i = 0; i < io_num.n_output; i++) {
        outputs[i].index = i;
        outputs[i].want_float = (uint8_t)atoi(argv[6]);
    }
    ret = rknn_outputs_get(ctx, io_num.n_output, outputs, NULL);
    if (ret < 0) { printf("rknn_outputs_get fail! ret=%d\n", ret); return 1; }
    for (uint32_t i = 0; i < io_num.n_output; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s%u.bin", argv[7], i);
        FILE* f = fopen(path, "wb");
        fwrite(outputs[i].buf, 1, outputs[i].size, f);
        fclose(f);
        printf("output %u: %u bytes\n", i, outputs[i].size);
    }
    rknn_perf_run perf;
    if (rknn_query(ctx, RKNN_QUERY_PERF_RUN, &perf, sizeof(perf)) == RKNN_SUCC)
        printf("run_duration=%lld us\n", (long long)perf.run_duration);
    rknn_mem_size mem_size;
    if (rknn_query(ctx, RKNN_QUERY_MEM_SIZE, &mem_size, sizeof(mem_size)) == RKNN_SUCC)
        printf("weight=%u internal=%u sram=%u\n", mem_size.total_weight_size, mem_size.total_internal_size,
               mem_size.total_sram_size);
    rknn_outputs_release(ctx, io_num.n_output, outputs);
    rknn_destroy(ctx);
    free(input);
    free(model);
    return 0;
}
