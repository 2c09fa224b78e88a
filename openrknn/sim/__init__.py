"""The simulator: lowers a built model to an executable ONNX graph and runs it on onnxruntime."""
