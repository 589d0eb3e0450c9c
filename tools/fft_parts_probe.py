"""Development probe (device): where the time of the FFT peer goes on 1 x 4000 at 64x64 (its
steps one by one) and the fused GPU FFT path (xcorr_app.correlate._fft) beside it."""
import cupy as cp, numpy as np
from xcorr_app._cuda.timing import time_gpu
from xcorr_app.correlate._direct import xcorr_fft
L=cp.random.rand(64,64,dtype=cp.float32); R=cp.random.rand(4000,64,64,dtype=cp.float32)
s=(128,128)
fl=cp.fft.rfft2(L,s=s); fr=cp.fft.rfft2(R,s=s); p=fl*cp.conj(fr); c=cp.fft.irfft2(p,s=s)
iy=cp.asarray(np.mod(np.arange(-63,64),128))[:,None]; ix=cp.asarray(np.mod(np.arange(-63,64),128))[None,:]
t=lambda f: time_gpu(f, warmup=3, repeat=20)
print("peer total", t(lambda: xcorr_fft(L,R,"one_to_many",None,dtype=np.float32)))
print("rfft2 rights", t(lambda: cp.fft.rfft2(R,s=s)))
print("pad copy", t(lambda: cp.pad(R,((0,0),(0,64),(0,64)))))
print("multiply", t(lambda: fl*cp.conj(fr)))
mul=cp.ElementwiseKernel("complex64 a, complex64 b","complex64 c","c = a * conj(b)","cm")
print("fused multiply", t(lambda: mul(fl,fr)))
print("irfft2", t(lambda: cp.fft.irfft2(p,s=s)))
print("crop fancy", t(lambda: c[...,iy,ix]))
print("crop slice copy", t(lambda: cp.ascontiguousarray(c[...,:127,:127])))
from xcorr_app.correlate._fft import fft_xcorr
o=cp.empty((4000,127,127),cp.float32)
print("ours (gpu_fft) total", t(lambda: fft_xcorr(L,R,"one_to_many",None,out=o)))
