// rknn_stub.cc -- a PC stand-in for the runtime library, for checking the demo builds and runs
// (cmake -DOPENRKNN_STUB_RUNTIME=ON). It has no NPU: it answers rknn_query from the generated
// model_io.h tables, checks input sizes, and returns zero-filled float32 outputs.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "model_io.h"
#include "rknn_api.h"

namespace {

struct StubContext {
    bool inputs_set = false;
};

size_t type_size(rknn_tensor_type type) {
    switch (type) {
        case RKNN_TENSOR_FLOAT32: case RKNN_TENSOR_INT32: case RKNN_TENSOR_UINT32: return 4;
        case RKNN_TENSOR_FLOAT16: case RKNN_TENSOR_INT16: case RKNN_TENSOR_UINT16: return 2;
        case RKNN_TENSOR_INT64: return 8;
        default: return 1;
    }
}

void fill_attr(const model_io::TensorSpec& spec, rknn_tensor_attr* attr) {
    uint32_t index = attr->index;
    std::memset(attr, 0, sizeof(rknn_tensor_attr));
    attr->index = index;
    attr->n_dims = spec.n_dims;
    std::memcpy(attr->dims, spec.dims, sizeof(attr->dims));
    std::strncpy(attr->name, spec.name, RKNN_MAX_NAME_LEN - 1);
    attr->n_elems = static_cast<uint32_t>(model_io::n_elems(spec));
    attr->size = static_cast<uint32_t>(attr->n_elems * type_size(spec.type));
    attr->size_with_stride = attr->size;
    attr->fmt = spec.fmt;
    attr->type = spec.type;
    attr->qnt_type = RKNN_TENSOR_QNT_NONE;
    attr->scale = 1.0f;
}

StubContext* get(rknn_context ctx) { return reinterpret_cast<StubContext*>(static_cast<uintptr_t>(ctx)); }

}  // namespace

extern "C" {

int rknn_init(rknn_context* context, void* model, uint32_t size, uint32_t, rknn_init_extend*) {
    if (context == nullptr || model == nullptr) return RKNN_ERR_PARAM_INVALID;
    std::fprintf(stderr, "openrknn stub runtime: no NPU here, outputs are zeros (model of %u bytes)\n", size);
    *context = static_cast<rknn_context>(reinterpret_cast<uintptr_t>(new (std::nothrow) StubContext()));
    return *context ? RKNN_SUCC : RKNN_ERR_MALLOC_FAIL;
}

int rknn_destroy(rknn_context context) {
    delete get(context);
    return RKNN_SUCC;
}

int rknn_query(rknn_context context, rknn_query_cmd cmd, void* info, uint32_t size) {
    if (!context || info == nullptr) return RKNN_ERR_PARAM_INVALID;
    if (cmd == RKNN_QUERY_IN_OUT_NUM && size >= sizeof(rknn_input_output_num)) {
        auto* num = static_cast<rknn_input_output_num*>(info);
        num->n_input = model_io::kNumInputs;
        num->n_output = model_io::kNumOutputs;
        return RKNN_SUCC;
    }
    if ((cmd == RKNN_QUERY_INPUT_ATTR || cmd == RKNN_QUERY_OUTPUT_ATTR) && size >= sizeof(rknn_tensor_attr)) {
        auto* attr = static_cast<rknn_tensor_attr*>(info);
        bool input = cmd == RKNN_QUERY_INPUT_ATTR;
        if (attr->index >= (input ? model_io::kNumInputs : model_io::kNumOutputs)) return RKNN_ERR_PARAM_INVALID;
        fill_attr(input ? model_io::kInputs[attr->index] : model_io::kOutputs[attr->index], attr);
        return RKNN_SUCC;
    }
    return RKNN_ERR_PARAM_INVALID;
}

int rknn_inputs_set(rknn_context context, uint32_t n_inputs, rknn_input inputs[]) {
    if (!context || n_inputs != model_io::kNumInputs) return RKNN_ERR_PARAM_INVALID;
    for (uint32_t i = 0; i < n_inputs; ++i) {
        const model_io::TensorSpec& spec = model_io::kInputs[inputs[i].index];
        size_t expected = model_io::n_elems(spec) * type_size(inputs[i].type);
        if (inputs[i].buf == nullptr || inputs[i].size != expected) {
            std::fprintf(stderr, "openrknn stub runtime: input %u has %u bytes, expected %zu\n", i, inputs[i].size,
                         expected);
            return RKNN_ERR_INPUT_INVALID;
        }
    }
    get(context)->inputs_set = true;
    return RKNN_SUCC;
}

int rknn_run(rknn_context context, rknn_run_extend*) {
    return context && get(context)->inputs_set ? RKNN_SUCC : RKNN_ERR_INPUT_INVALID;
}

int rknn_outputs_get(rknn_context context, uint32_t n_outputs, rknn_output outputs[], rknn_output_extend*) {
    if (!context || n_outputs != model_io::kNumOutputs) return RKNN_ERR_PARAM_INVALID;
    for (uint32_t i = 0; i < n_outputs; ++i) {
        size_t n = model_io::n_elems(model_io::kOutputs[outputs[i].index]);
        outputs[i].size = static_cast<uint32_t>(n * sizeof(float));
        outputs[i].buf = std::calloc(n, sizeof(float));
        if (outputs[i].buf == nullptr) return RKNN_ERR_MALLOC_FAIL;
    }
    return RKNN_SUCC;
}

int rknn_outputs_release(rknn_context, uint32_t n_outputs, rknn_output outputs[]) {
    for (uint32_t i = 0; i < n_outputs; ++i) {
        std::free(outputs[i].buf);
        outputs[i].buf = nullptr;
    }
    return RKNN_SUCC;
}

}  // extern "C"
