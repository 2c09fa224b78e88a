// main.cc -- run the model once with the general C API and check it against the openrknn simulator.
//
// usage: rknn_app_demo [model.rknn] [data_dir]
//   data_dir/input_<i>.npy          input i in the API layout (else a test pattern is used)
//   data_dir/golden_output_<i>.npy  the simulator's output i (written by codegen when given inputs)
//   data_dir/demo_output_<i>.npy    written here: the runtime's output i
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model_io.h"
#include "npy.h"
#include "rknn_app.h"

static double cosine(const std::vector<float>& a, const npy::Array& b) {
    if (b.descr != "<f4" || b.n_elems() != a.size()) return -2.0;
    const float* g = reinterpret_cast<const float*>(b.data.data());
    double dot = 0.0, na = 0.0, nb = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        dot += static_cast<double>(a[i]) * g[i];
        na += static_cast<double>(a[i]) * a[i];
        nb += static_cast<double>(g[i]) * g[i];
    }
    return dot / (std::sqrt(na) * std::sqrt(nb) + 1e-30);
}

static int load_inputs(const std::string& data_dir, std::vector<model_io::InputBuffer>& inputs) {
    inputs.assign(model_io::kNumInputs, model_io::InputBuffer());
    for (uint32_t i = 0; i < model_io::kNumInputs; ++i) {
        std::string path = data_dir + "/input_" + std::to_string(i) + ".npy";
        npy::Array file;
        std::string error;
        bool have_file = npy::exists(path);
        if (have_file && !npy::load(path, file, error)) {
            std::fprintf(stderr, "%s\n", error.c_str());
            return -1;
        }
        std::printf("input %u '%s': %s\n", i, model_io::kInputs[i].name, have_file ? path.c_str() : "test pattern");
        if (model_io::preprocess(i, have_file ? &file : nullptr, inputs[i]) != 0) return -1;
    }
    return 0;
}

static int check_outputs(const std::string& data_dir, const std::vector<std::vector<float>>& outputs) {
    int status = 0;
    for (uint32_t i = 0; i < outputs.size(); ++i) {
        const model_io::TensorSpec& spec = model_io::kOutputs[i];
        std::vector<size_t> shape(spec.dims, spec.dims + spec.n_dims);
        if (outputs[i].size() != model_io::n_elems(spec)) {
            std::fprintf(stderr, "output %u '%s': %zu values, expected %zu\n", i, spec.name, outputs[i].size(),
                         model_io::n_elems(spec));
            status = -1;
            continue;
        }
        model_io::postprocess(i, outputs[i].data(), outputs[i].size());
        npy::save_float32(data_dir + "/demo_output_" + std::to_string(i) + ".npy", outputs[i].data(), shape);
        std::string golden_path = data_dir + "/golden_output_" + std::to_string(i) + ".npy";
        npy::Array golden;
        std::string error;
        if (npy::exists(golden_path) && npy::load(golden_path, golden, error)) {
            std::printf("output %u '%s': cosine similarity with the openrknn simulator: %.6f\n", i, spec.name,
                        cosine(outputs[i], golden));
        }
    }
    return status;
}

int main(int argc, char** argv) {
    std::string model_path = argc > 1 ? argv[1] : model_io::kModelFile;
    std::string data_dir = argc > 2 ? argv[2] : "data";
    std::printf("model %s (%s)\n", model_io::kModelName, model_path.c_str());
    RknnApp app;
    if (app.init(model_path) != RKNN_SUCC) return 1;
    std::vector<model_io::InputBuffer> inputs;
    if (load_inputs(data_dir, inputs) != 0) return 1;
    std::vector<std::vector<float>> outputs;
    double run_ms = 0.0;
    if (app.run(inputs, outputs, run_ms) != RKNN_SUCC) return 1;
    std::printf("rknn_run: %.3f ms\n", run_ms);
    return check_outputs(data_dir, outputs) == 0 ? 0 : 1;
}
