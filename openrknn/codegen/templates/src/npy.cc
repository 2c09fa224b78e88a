// npy.cc -- see npy.h. Format: magic "\x93NUMPY", version, header length, a Python-dict header.
#include "npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace npy {

namespace {

struct TypeInfo {
    const char* descr;
    size_t size;
    rknn_tensor_type type;
};

const TypeInfo kTypes[] = {
    {"<f4", 4, RKNN_TENSOR_FLOAT32}, {"<f2", 2, RKNN_TENSOR_FLOAT16}, {"|i1", 1, RKNN_TENSOR_INT8},
    {"|u1", 1, RKNN_TENSOR_UINT8},   {"<i2", 2, RKNN_TENSOR_INT16},   {"<u2", 2, RKNN_TENSOR_UINT16},
    {"<i4", 4, RKNN_TENSOR_INT32},   {"<u4", 4, RKNN_TENSOR_UINT32},  {"<i8", 8, RKNN_TENSOR_INT64},
    {"|b1", 1, RKNN_TENSOR_BOOL},
};

const TypeInfo* find_type(const std::string& descr) {
    for (const TypeInfo& t : kTypes) {
        if (descr == t.descr) return &t;
    }
    return nullptr;
}

std::string field(const std::string& header, const std::string& key) {
    size_t at = header.find("'" + key + "'");
    if (at == std::string::npos) return "";
    at = header.find(':', at);
    size_t end = key == "shape" ? header.find(')', at) + 1 : header.find(',', at);
    return header.substr(at + 1, end - at - 1);
}

}  // namespace

size_t Array::item_size() const {
    const TypeInfo* t = find_type(descr);
    return t ? t->size : 0;
}

size_t Array::n_elems() const {
    size_t n = 1;
    for (size_t d : shape) n *= d;
    return n;
}

rknn_tensor_type Array::rknn_type() const {
    const TypeInfo* t = find_type(descr);
    return t ? t->type : RKNN_TENSOR_TYPE_MAX;
}

bool exists(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return f.good();
}

bool load(const std::string& path, Array& out, std::string& error) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        error = "cannot open " + path;
        return false;
    }
    char magic[8];
    if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) {
        error = path + " is not a .npy file";
        return false;
    }
    uint32_t header_len = 0;
    unsigned char len_bytes[4] = {0, 0, 0, 0};
    f.read(reinterpret_cast<char*>(len_bytes), magic[6] == 1 ? 2 : 4);
    header_len = len_bytes[0] | (len_bytes[1] << 8) | (len_bytes[2] << 16) | (static_cast<uint32_t>(len_bytes[3]) << 24);
    std::string header(header_len, '\0');
    f.read(&header[0], header_len);
    std::string descr = field(header, "descr");
    size_t q1 = descr.find('\''), q2 = descr.rfind('\'');
    out.descr = q1 == std::string::npos || q2 <= q1 ? "" : descr.substr(q1 + 1, q2 - q1 - 1);
    if (find_type(out.descr) == nullptr) {
        error = path + ": unsupported dtype '" + out.descr + "'";
        return false;
    }
    if (field(header, "fortran_order").find("True") != std::string::npos) {
        error = path + ": Fortran-ordered arrays are not supported; save with np.ascontiguousarray";
        return false;
    }
    std::string shape = field(header, "shape");
    out.shape.clear();
    std::stringstream dims(shape.substr(shape.find('(') + 1));
    std::string item;
    while (std::getline(dims, item, ',')) {
        if (item.find_first_of("0123456789") != std::string::npos) out.shape.push_back(std::stoul(item));
    }
    out.data.resize(out.n_elems() * out.item_size());
    if (!f.read(reinterpret_cast<char*>(out.data.data()), static_cast<std::streamsize>(out.data.size()))) {
        error = path + " is truncated";
        return false;
    }
    return true;
}

bool save_float32(const std::string& path, const float* data, const std::vector<size_t>& shape) {
    std::string dims;
    size_t n = 1;
    for (size_t d : shape) {
        dims += std::to_string(d) + ",";
        n *= d;
    }
    if (shape.size() > 1) dims.pop_back();
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
    size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::ofstream f(path, std::ios::binary);
    if (!f) return false;
    const char prefix[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    f.write(prefix, 8);
    const unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff),
                                  static_cast<unsigned char>(header.size() >> 8)};
    f.write(reinterpret_cast<const char*>(len), 2);
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * sizeof(float)));
    return f.good();
}

}  // namespace npy
