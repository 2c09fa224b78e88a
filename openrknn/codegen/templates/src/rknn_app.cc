// rknn_app.cc -- see rknn_app.h.
#include "rknn_app.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

size_t tensor_type_size(rknn_tensor_type type) {
    switch (type) {
        case RKNN_TENSOR_FLOAT32: case RKNN_TENSOR_INT32: case RKNN_TENSOR_UINT32: return 4;
        case RKNN_TENSOR_FLOAT16: case RKNN_TENSOR_INT16: case RKNN_TENSOR_UINT16: return 2;
        case RKNN_TENSOR_INT64: return 8;
        default: return 1;
    }
}

static void print_attr(const char* kind, const rknn_tensor_attr& a) {
    std::printf("  %s %u '%s' dims [", kind, a.index, a.name);
    for (uint32_t i = 0; i < a.n_dims; ++i) std::printf(i ? ", %u" : "%u", a.dims[i]);
    std::printf("] n_elems %u size %u fmt %s type %s zp %d scale %f\n", a.n_elems, a.size,
                get_format_string(a.fmt), get_type_string(a.type), a.zp, a.scale);
}

RknnApp::~RknnApp() {
    if (ready_) rknn_destroy(ctx_);
}

int RknnApp::init(const std::string& model_path) {
    std::ifstream file(model_path, std::ios::binary);
    if (!file) {
        std::fprintf(stderr, "cannot open model %s\n", model_path.c_str());
        return -1;
    }
    model_.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    int ret = rknn_init(&ctx_, model_.data(), static_cast<uint32_t>(model_.size()), 0, nullptr);
    if (ret != RKNN_SUCC) {
        std::fprintf(stderr, "rknn_init failed: %d\n", ret);
        return ret;
    }
    ready_ = true;
    return query_io();
}

int RknnApp::query_io() {
    int ret = rknn_query(ctx_, RKNN_QUERY_IN_OUT_NUM, &io_num_, sizeof(io_num_));
    if (ret != RKNN_SUCC) return ret;
    if (io_num_.n_input != model_io::kNumInputs || io_num_.n_output != model_io::kNumOutputs) {
        std::fprintf(stderr, "the model has %u inputs / %u outputs; this demo was generated for %u / %u\n",
                     io_num_.n_input, io_num_.n_output, model_io::kNumInputs, model_io::kNumOutputs);
        return RKNN_ERR_MODEL_INVALID;
    }
    input_attrs_.assign(io_num_.n_input, rknn_tensor_attr{});
    output_attrs_.assign(io_num_.n_output, rknn_tensor_attr{});
    for (uint32_t i = 0; i < io_num_.n_input; ++i) {
        input_attrs_[i].index = i;
        ret = rknn_query(ctx_, RKNN_QUERY_INPUT_ATTR, &input_attrs_[i], sizeof(rknn_tensor_attr));
        if (ret != RKNN_SUCC) return ret;
        print_attr("input", input_attrs_[i]);
    }
    for (uint32_t i = 0; i < io_num_.n_output; ++i) {
        output_attrs_[i].index = i;
        ret = rknn_query(ctx_, RKNN_QUERY_OUTPUT_ATTR, &output_attrs_[i], sizeof(rknn_tensor_attr));
        if (ret != RKNN_SUCC) return ret;
        print_attr("output", output_attrs_[i]);
    }
    return RKNN_SUCC;
}

int RknnApp::run(std::vector<model_io::InputBuffer>& inputs, std::vector<std::vector<float>>& outputs,
                 double& run_ms) {
    std::vector<rknn_input> feed(io_num_.n_input);
    for (uint32_t i = 0; i < io_num_.n_input; ++i) {
        std::memset(&feed[i], 0, sizeof(rknn_input));
        feed[i].index = i;
        feed[i].type = inputs[i].type;
        feed[i].fmt = model_io::kInputs[i].fmt;
        feed[i].size = static_cast<uint32_t>(inputs[i].bytes.size());
        feed[i].buf = inputs[i].bytes.data();
        feed[i].pass_through = 0;
    }
    int ret = rknn_inputs_set(ctx_, io_num_.n_input, feed.data());
    if (ret != RKNN_SUCC) {
        std::fprintf(stderr, "rknn_inputs_set failed: %d\n", ret);
        return ret;
    }
    auto start = std::chrono::steady_clock::now();
    ret = rknn_run(ctx_, nullptr);
    run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (ret != RKNN_SUCC) {
        std::fprintf(stderr, "rknn_run failed: %d\n", ret);
        return ret;
    }
    std::vector<rknn_output> results(io_num_.n_output);
    for (uint32_t i = 0; i < io_num_.n_output; ++i) {
        std::memset(&results[i], 0, sizeof(rknn_output));
        results[i].index = i;
        results[i].want_float = 1;
    }
    ret = rknn_outputs_get(ctx_, io_num_.n_output, results.data(), nullptr);
    if (ret != RKNN_SUCC) {
        std::fprintf(stderr, "rknn_outputs_get failed: %d\n", ret);
        return ret;
    }
    outputs.assign(io_num_.n_output, std::vector<float>());
    for (uint32_t i = 0; i < io_num_.n_output; ++i) {
        const float* data = static_cast<const float*>(results[i].buf);
        outputs[i].assign(data, data + results[i].size / sizeof(float));
    }
    return rknn_outputs_release(ctx_, io_num_.n_output, results.data());
}
