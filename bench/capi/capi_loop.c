/*
 * capi_loop.c -- time the general API on one model: LOOPS x (inputs_set, run, outputs_get, release),
 * and LOOPS x rknn_query(IN_OUT_NUM) (the cost of one call crossing into the runtime).
 * usage: capi_loop MODEL INPUT.bin(uint8 NHWC) LOOPS  -> prints "query_us run_us" (medians)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rknn_api.h"

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int compare(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

int main(int argc, char** argv) {
    if (argc < 4) return 2;
    int loops = atoi(argv[3]);
    rknn_context ctx;
    if (rknn_init(&ctx, argv[1], 0, 0, NULL) < 0) return 1;
    FILE* f = fopen(argv[2], "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char* data = (unsigned char*)malloc(size);
    if (fread(data, 1, size, f) != (size_t)size) return 1;
    fclose(f);
    rknn_input_output_num io;
    double* times = (double*)malloc(sizeof(double) * loops);
    for (int i = 0; i < loops; i++) {
        double t = now_us();
        rknn_query(ctx, RKNN_QUERY_IN_OUT_NUM, &io, sizeof(io));
        times[i] = now_us() - t;
    }
    qsort(times, loops, sizeof(double), compare);
    double query_us = times[loops / 2];
    rknn_input input;
    memset(&input, 0, sizeof(input));
    input.type = RKNN_TENSOR_UINT8;
    input.fmt = RKNN_TENSOR_NHWC;
    input.size = (uint32_t)size;
    input.buf = data;
    rknn_output outputs[16];
    for (int i = 0; i < loops + 3; i++) {
        double t = now_us();
        rknn_inputs_set(ctx, 1, &input);
        rknn_run(ctx, NULL);
        memset(outputs, 0, sizeof(outputs));
        for (uint32_t k = 0; k < io.n_output; k++) { outputs[k].index = k; outputs[k].want_float = 1; }
        rknn_outputs_get(ctx, io.n_output, outputs, NULL);
        rknn_outputs_release(ctx, io.n_output, outputs);
        if (i >= 3) times[i - 3] = now_us() - t;   /* 3 warm-up runs */
    }
    qsort(times, loops, sizeof(double), compare);
    printf("%.2f %.2f\n", query_us, times[loops / 2]);
    rknn_destroy(ctx);
    return 0;
}
