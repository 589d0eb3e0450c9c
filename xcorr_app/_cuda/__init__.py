"""CUDA plumbing shared by every kernel family: the loader (sources, instantiations, per-device
cache), prepared launches, GPU timing, and the CI compile check.  Kernel sources live beside the
modules that launch them (``<subpackage>/cuda/*.cu``); shared headers in ``include/``."""
