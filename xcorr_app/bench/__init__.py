"""The ``xcorr bench`` benchmarks: ours against the peers, cold and warm, with CUDA events."""
