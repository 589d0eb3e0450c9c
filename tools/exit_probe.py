"""Development probe (device): where a warm one-shot `xcorr align` spends its wall time outside
the measuring: interpreter start and imports, the CLI, and the teardown at exit (issue 26).

    python3 tools/exit_probe.py [fast] align STACK ...

Prints the seconds from the interpreter's start to the CLI's entry, the CLI's own time, and
(without ``fast``) lets the process exit normally; with ``fast`` it leaves by ``os._exit`` right
after the CLI returned, so the shell's wall time minus the CLI's shows what the normal teardown
costs (freeing page-locked buffers, the CUDA context, the interpreter).
"""
import os
import sys
import time

t_start = time.perf_counter()
fast = sys.argv[1] == "fast"
argv = sys.argv[2:] if fast else sys.argv[1:]
from xcorr_app.cli._main import cli  # noqa: E402

t_import = time.perf_counter()
try:
    cli.main(args=argv, prog_name="xcorr", standalone_mode=False)
except SystemExit:
    pass
t_end = time.perf_counter()
print(f"exit_probe: imports {t_import - t_start:.2f} s, cli {t_end - t_import:.2f} s "
      f"({'os._exit' if fast else 'normal exit'})", file=sys.stderr, flush=True)
if fast:
    os._exit(0)
