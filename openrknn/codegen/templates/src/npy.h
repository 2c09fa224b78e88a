// npy.h -- a small reader/writer for NumPy .npy files (little-endian, C order), enough for the demo.
#ifndef RKNN_APP_NPY_H
#define RKNN_APP_NPY_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rknn_api.h"

namespace npy {

struct Array {
    std::string descr;                 // e.g. "<f4", "|u1"
    std::vector<size_t> shape;
    std::vector<uint8_t> data;

    size_t item_size() const;
    size_t n_elems() const;
    rknn_tensor_type rknn_type() const;
};

// Returns false and sets `error` when the file is missing or not a supported .npy.
bool load(const std::string& path, Array& out, std::string& error);
bool save_float32(const std::string& path, const float* data, const std::vector<size_t>& shape);
bool exists(const std::string& path);

}  // namespace npy

#endif  // RKNN_APP_NPY_H
