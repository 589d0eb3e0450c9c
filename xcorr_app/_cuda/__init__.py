"""CUDA plumbing shared by every kernel family: the loader (sources, instantiations, per-device
cache), prepared launches, GPU timing, and the CI compile check.  The kernel sources live in the
top-level ``kernels/`` (``kernels/<family>/*.cu``, shared headers in ``kernels/include/``)."""
