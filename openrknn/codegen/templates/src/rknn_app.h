// rknn_app.h -- a thin owner of one RKNN context, using the general C API:
// rknn_init -> rknn_query -> rknn_inputs_set -> rknn_run -> rknn_outputs_get -> rknn_outputs_release -> rknn_destroy.
#ifndef RKNN_APP_RKNN_APP_H
#define RKNN_APP_RKNN_APP_H

#include <string>
#include <vector>

#include "model_io.h"
#include "rknn_api.h"

class RknnApp {
public:
    RknnApp() = default;
    RknnApp(const RknnApp&) = delete;
    RknnApp& operator=(const RknnApp&) = delete;
    ~RknnApp();

    // Load the model file and query its inputs/outputs; 0 on success.
    int init(const std::string& model_path);
    // Feed `inputs` (one per model input), run, and copy the float32 outputs; 0 on success.
    int run(std::vector<model_io::InputBuffer>& inputs, std::vector<std::vector<float>>& outputs, double& run_ms);

    const std::vector<rknn_tensor_attr>& input_attrs() const { return input_attrs_; }
    const std::vector<rknn_tensor_attr>& output_attrs() const { return output_attrs_; }

private:
    int query_io();

    rknn_context ctx_ = 0;
    bool ready_ = false;
    std::vector<char> model_;
    rknn_input_output_num io_num_{};
    std::vector<rknn_tensor_attr> input_attrs_;
    std::vector<rknn_tensor_attr> output_attrs_;
};

size_t tensor_type_size(rknn_tensor_type type);

#endif  // RKNN_APP_RKNN_APP_H
