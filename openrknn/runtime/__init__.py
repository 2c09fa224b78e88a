"""Board-side style runtimes: ``RKNNLite`` (runs .rknn files on the simulator when no NPU is present)."""
