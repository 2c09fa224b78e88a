"""The ONNX graph in the middle: IR helpers, the compiled-model record and the passes."""
