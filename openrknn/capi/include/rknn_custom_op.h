/*
 * rknn_custom_op.h -- openrknn's declaration of the documented custom-operator API (seed 002 §5.5.4).
 *
 * openrknn's librknnrt runs CPU custom operators: init once at registration, prepare and compute on
 * every rknn_run (float32, NCHW or UNDEFINED layout), destroy at rknn_destroy. GPU (OpenCL)
 * operators are refused with RKNN_ERR_PARAM_INVALID: there is no OpenCL device behind this runtime.
 */
#ifndef OPENRKNN_RKNN_CUSTOM_OP_H
#define OPENRKNN_RKNN_CUSTOM_OP_H

#include "rknn_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RKNN_CUSTOM_OP_MAX_STR_LEN 64
#define RKNN_CUSTOM_OP_MAX_VALUE_LEN 32
#define RKNN_CUSTOM_OP_EXPORT __attribute__((visibility("default")))

typedef enum _rknn_target_type {
    RKNN_TARGET_TYPE_CPU = 1,
    RKNN_TARGET_TYPE_GPU = 2
} rknn_target_type;

typedef uint64_t rknn_custom_op_interal_context;

typedef struct _rknn_gpu_op_context {
    void* cl_context;
    void* cl_command_queue;
    void* cl_kernel;
} rknn_gpu_op_context;

typedef struct _rknn_custom_op_context {
    rknn_target_type target;
    rknn_custom_op_interal_context internal_ctx;   /* the runtime's; leave it alone */
    rknn_gpu_op_context gpu_ctx;
    void* priv_data;                               /* the operator's own, e.g. set in init, freed in destroy */
} rknn_custom_op_context;

typedef struct _rknn_custom_op_tensor {
    rknn_tensor_attr attr;
    rknn_tensor_mem mem;                           /* data at mem.virt_addr + mem.offset */
} rknn_custom_op_tensor;

typedef struct _rknn_custom_op_attr {
    char name[RKNN_MAX_NAME_LEN];
    rknn_tensor_type dtype;
    uint32_t n_elems;
    void* data;
} rknn_custom_op_attr;

typedef int (*rknn_custom_op_callback)(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs,
                                       uint32_t n_inputs, rknn_custom_op_tensor* outputs, uint32_t n_outputs);

typedef struct _rknn_custom_op {
    uint32_t version;
    rknn_target_type target;
    char op_type[RKNN_MAX_NAME_LEN];
    char cl_kernel_name[RKNN_MAX_NAME_LEN];
    char* cl_kernel_source;
    uint64_t cl_source_size;
    char cl_build_options[RKNN_MAX_NAME_LEN];
    int (*init)(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs, uint32_t n_inputs,
                rknn_custom_op_tensor* outputs, uint32_t n_outputs);
    int (*prepare)(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs, uint32_t n_inputs,
                   rknn_custom_op_tensor* outputs, uint32_t n_outputs);
    int (*compute)(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs, uint32_t n_inputs,
                   rknn_custom_op_tensor* outputs, uint32_t n_outputs);
    int (*compute_native)(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs, uint32_t n_inputs,
                          rknn_custom_op_tensor* outputs, uint32_t n_outputs);
    int (*destroy)(rknn_custom_op_context* op_ctx);
} rknn_custom_op;

typedef rknn_custom_op* (*get_custom_op_func)();

int rknn_register_custom_ops(rknn_context ctx, rknn_custom_op* op, uint32_t custom_op_num);
void rknn_custom_op_get_op_attr(rknn_custom_op_context* op_ctx, const char* attr_name, rknn_custom_op_attr* op_attr);

#ifdef __cplusplus
}
#endif

#endif /* OPENRKNN_RKNN_CUSTOM_OP_H */
