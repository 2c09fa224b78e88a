/* layout.c -- sizes and field offsets of the API structures as the C compiler lays them out. */
#include <stddef.h>
#include <stdio.h>

#include "rknn_api.h"
#include "rknn_custom_op.h"
#include "rknn_matmul_api.h"

#define SIZE(t) printf("%s %zu\n", #t, sizeof(t))
#define FIELD(t, f) printf("%s.%s %zu\n", #t, #f, offsetof(t, f))

int main(void) {
    SIZE(rknn_context);
    SIZE(rknn_tensor_attr); FIELD(rknn_tensor_attr, name); FIELD(rknn_tensor_attr, fl); FIELD(rknn_tensor_attr, zp);
    FIELD(rknn_tensor_attr, pass_through); FIELD(rknn_tensor_attr, h_stride);
    SIZE(rknn_input); FIELD(rknn_input, buf); FIELD(rknn_input, pass_through); FIELD(rknn_input, fmt);
    SIZE(rknn_output); FIELD(rknn_output, index); FIELD(rknn_output, buf); FIELD(rknn_output, size);
    SIZE(rknn_tensor_mem); FIELD(rknn_tensor_mem, phys_addr); FIELD(rknn_tensor_mem, fd); FIELD(rknn_tensor_mem, priv_data);
    SIZE(rknn_init_extend); FIELD(rknn_init_extend, real_model_offset); FIELD(rknn_init_extend, reserved);
    SIZE(rknn_run_extend); FIELD(rknn_run_extend, non_block); SIZE(rknn_mem_size); FIELD(rknn_mem_size, total_sram_size);
    SIZE(rknn_input_range); FIELD(rknn_input_range, dyn_range); FIELD(rknn_input_range, n_dims);
    SIZE(rknn_perf_detail); SIZE(rknn_sdk_version); SIZE(rknn_custom_string);
    SIZE(rknn_matmul_info); FIELD(rknn_matmul_info, B_layout); FIELD(rknn_matmul_info, iommu_domain_id);
    FIELD(rknn_matmul_info, group_size);
    SIZE(rknn_matmul_tensor_attr); FIELD(rknn_matmul_tensor_attr, size); SIZE(rknn_matmul_io_attr);
    SIZE(rknn_quant_params); FIELD(rknn_quant_params, scale); FIELD(rknn_quant_params, zp_len);
    SIZE(rknn_matmul_shape);
    SIZE(rknn_custom_op_context); FIELD(rknn_custom_op_context, internal_ctx); FIELD(rknn_custom_op_context, priv_data);
    SIZE(rknn_custom_op_tensor); FIELD(rknn_custom_op_tensor, mem);
    SIZE(rknn_custom_op_attr); FIELD(rknn_custom_op_attr, data);
    SIZE(rknn_custom_op); FIELD(rknn_custom_op, cl_kernel_source); FIELD(rknn_custom_op, cl_build_options);
    FIELD(rknn_custom_op, init); FIELD(rknn_custom_op, destroy);
    return 0;
}
