"""Development probe (device, where cuobjdump is installed): the SASS of one kernel
instantiation as nvcc builds it for sm_90, and a count of its instructions by opcode.

    python3 tools/sass_probe.py reuse_conv.cu 'reuse_correlate<0, 5, 5, false, 1, true>' OUT.sass
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

from xcorr_app._cuda.compile_check import translation_unit
from xcorr_app._cuda.loader import COMPILE_OPTIONS, include_options, source_path

source, expr, dest = sys.argv[1], sys.argv[2], sys.argv[3]
d = tempfile.mkdtemp()
with open(os.path.join(d, "k.cu"), "w") as f:
    f.write(translation_unit(str(source_path(source)), [expr]))
subprocess.run(["nvcc", "-cubin", "-arch=sm_90", *COMPILE_OPTIONS, *include_options(source_path(source)),
                *sys.argv[4:], os.path.join(d, "k.cu"), "-o", os.path.join(d, "k.cubin")],
               check=True)
sass = subprocess.run(["cuobjdump", "-sass", os.path.join(d, "k.cubin")], check=True,
                      capture_output=True, text=True).stdout
with open(dest, "w") as f:
    f.write(sass)
ops = collections.Counter(m.group(1).split(".")[0]
                          for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass))
print(" ".join(f"{k}:{v}" for k, v in ops.most_common(25)))
