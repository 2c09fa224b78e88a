/*
 * zero_copy.c -- the zero-copy flow of seed 002 §5.2 (input/output memory allocated by the runtime):
 * query NATIVE_INPUT_ATTR / NATIVE_OUTPUT_ATTR -> rknn_create_mem -> rknn_set_io_mem -> rknn_run.
 *
 * usage: zero_copy MODEL IN1.bin IN2.bin OUT_PREFIX MODE
 *   IN*.bin: uint8 NHWC images. MODE: native (outputs in the native attribute, e.g. NC1HWC2 int8),
 *   float (outputs set to FLOAT32 NCHW, size x4), nhwc (NATIVE_NHWC_OUTPUT_ATTR), fd (as native, but the
 *   input memory is a memfd given by fd (the runtime maps it; this program writes through its own mapping)
 *   and the outputs are this program's malloc'ed buffers given by rknn_create_mem_from_phys).
 * Frame 1 runs IN1; frame 2 writes IN2 straight into the same input memory and runs again without
 * another rknn_set_io_mem. Writes OUT_PREFIX<frame>_<output>.bin.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rknn_api.h"

static int load(const char* path, void* dst, size_t size) {
    FILE* f = fopen(path, "rb");
    if (!f) return -1;
    size_t got = fread(dst, 1, size, f);
    fclose(f);
    return got == size ? 0 : -1;
}

int main(int argc, char** argv) {
    if (argc < 6) return 2;
    rknn_context ctx = 0;
    int ret = rknn_init(&ctx, argv[1], 0, 0, NULL);
    if (ret < 0) { printf("rknn_init fail! ret=%d\n", ret); return 1; }
    rknn_input_output_num io_num;
    rknn_query(ctx, RKNN_QUERY_IN_OUT_NUM, &io_num, sizeof(io_num));

    rknn_tensor_attr input_attrs[4];
    memset(input_attrs, 0, sizeof(input_attrs));
    input_attrs[0].index = 0;
    ret = rknn_query(ctx, RKNN_QUERY_NATIVE_INPUT_ATTR, &input_attrs[0], sizeof(rknn_tensor_attr));
    if (ret < 0) { printf("rknn_query fail! ret=%d\n", ret); return 1; }
    printf("native input fmt=%d type=%d size_with_stride=%u\n", input_attrs[0].fmt, input_attrs[0].type,
           input_attrs[0].size_with_stride);

    /* feed raw uint8 NHWC pixels: the runtime normalises and quantizes */
    input_attrs[0].type = RKNN_TENSOR_UINT8;
    input_attrs[0].fmt = RKNN_TENSOR_NHWC;
    uint32_t input_size = input_attrs[0].n_elems;   /* one byte per element */
    int use_fd = strcmp(argv[5], "fd") == 0;
    rknn_tensor_mem* input_mem = NULL;
    void* input_view = NULL;                         /* where this program writes the input */
    if (use_fd) {
        int fd = memfd_create("rknn_input", 0);
        if (fd < 0 || ftruncate(fd, input_size) != 0) return 1;
        input_mem = rknn_create_mem_from_fd(ctx, fd, NULL, input_size, 0);
        input_view = mmap(NULL, input_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (input_view == MAP_FAILED) return 1;
        printf("fd memory: runtime mapping %s this program's\n", input_mem && input_mem->virt_addr != input_view
                                                                   ? "differs from" : "is");
    } else {
        input_mem = rknn_create_mem(ctx, input_size);
        if (input_mem) input_view = input_mem->virt_addr;
    }
    if (!input_mem) { printf("rknn_create_mem fail\n"); return 1; }
    if (load(argv[2], input_view, input_size) != 0) { printf("bad input\n"); return 1; }
    ret = rknn_set_io_mem(ctx, input_mem, &input_attrs[0]);
    if (ret < 0) { printf("rknn_set_io_mem fail! ret=%d\n", ret); return 1; }

    rknn_tensor_attr output_attrs[4];
    rknn_tensor_mem* output_mems[4];
    memset(output_attrs, 0, sizeof(output_attrs));
    for (uint32_t i = 0; i < io_num.n_output; i++) {
        output_attrs[i].index = i;
        int cmd = strcmp(argv[5], "nhwc") == 0 ? RKNN_QUERY_NATIVE_NHWC_OUTPUT_ATTR : RKNN_QUERY_NATIVE_OUTPUT_ATTR;
        ret = rknn_query(ctx, (rknn_query_cmd)cmd, &output_attrs[i], sizeof(rknn_tensor_attr));
        if (ret < 0) { printf("rknn_query fail! ret=%d\n", ret); return 1; }
        uint32_t size = output_attrs[i].size_with_stride;
        if (strcmp(argv[5], "float") == 0) {
            rknn_tensor_attr plain;
            memset(&plain, 0, sizeof(plain));
            plain.index = i;
            rknn_query(ctx, RKNN_QUERY_OUTPUT_ATTR, &plain, sizeof(plain));
            output_attrs[i] = plain;
            output_attrs[i].type = RKNN_TENSOR_FLOAT32;
            size = plain.n_elems * sizeof(float);
            output_attrs[i].size = size;
        }
        printf("output %u fmt=%d type=%d n_dims=%u size=%u\n", i, output_attrs[i].fmt, output_attrs[i].type,
               output_attrs[i].n_dims, size);
        output_mems[i] = use_fd ? rknn_create_mem_from_phys(ctx, 0x10000000ull, malloc(size), size)
                                : rknn_create_mem(ctx, size);
        ret = rknn_set_io_mem(ctx, output_mems[i], &output_attrs[i]);
        if (ret < 0) { printf("rknn_set_io_mem fail! ret=%d\n", ret); return 1; }
    }

    for (int frame = 1; frame <= 2; frame++) {
        if (frame == 2 && load(argv[3], input_view, input_size) != 0) return 1;
        rknn_mem_sync(ctx, input_mem, RKNN_MEMORY_SYNC_TO_DEVICE);
        ret = rknn_run(ctx, NULL);
        if (ret < 0) { printf("rknn_run fail! ret=%d\n", ret); return 1; }
        for (uint32_t i = 0; i < io_num.n_output; i++) {
            rknn_mem_sync(ctx, output_mems[i], RKNN_MEMORY_SYNC_FROM_DEVICE);
            char path[4096];
            snprintf(path, sizeof(path), "%s%d_%u.bin", argv[4], frame, i);
            FILE* f = fopen(path, "wb");
            fwrite(output_mems[i]->virt_addr, 1, output_mems[i]->size, f);
            fclose(f);
        }
    }
    rknn_destroy_mem(ctx, input_mem);
    for (uint32_t i = 0; i < io_num.n_output; i++) rknn_destroy_mem(ctx, output_mems[i]);
    rknn_destroy(ctx);
    printf("done\n");
    return 0;
}
