"""Legacy module names of onnxruntime-training (``onnxruntime.capi``): ort_trainer."""
