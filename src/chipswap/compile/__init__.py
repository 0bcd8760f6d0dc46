"""Compile: one artifact per bucket shape, cached by content, checked against eager PyTorch.

- backends/    compiler backends behind one interface (onnxruntime, AOTInductor, Neuron);
- cache.py     the content-addressed artifact cache (one compile per key across processes, atomic publish);
- signing.py   the cache key kept outside the cache and the HMAC tag every entry carries;
- compiler.py  compile every bucket of a shape plan; the compiled set (`chipswap.compiled/1`) and its reader.

torch and the compilers are imported inside functions where possible; nothing here prints.
"""
