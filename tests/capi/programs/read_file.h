/* read_file.h -- the test programs' one file reader: the whole file in a malloc'd buffer, NULL on failure. */
#ifndef OPENRKNN_TEST_READ_FILE_H
#define OPENRKNN_TEST_READ_FILE_H

#include <stdio.h>
#include <stdlib.h>

static void* read_file(const char* path, size_t* size) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long length = ftell(f);
    fseek(f, 0, SEEK_SET);
    void* data = length >= 0 ? malloc(length > 0 ? (size_t)length : 1) : NULL;
    if (data && fread(data, 1, (size_t)length, f) != (size_t)length) { free(data); data = NULL; }
    fclose(f);
    *size = data ? (size_t)length : 0;
    return data;
}

#endif
