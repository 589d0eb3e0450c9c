"""The columns of a pass's result table: one row a frame.

>>> COLUMN["dy"], COLUMN["dx"]
(0, 1)
"""

#: columns of the per-frame result block copied back from the device once per chunk
#: (``border``: the integer peak lies on the border of the searched window)
COLUMNS = ("dy", "dx", "peak", "confidence", "constant", "finite", "fft_dy", "fft_dx",
            "fft_iy", "fft_ix", "border")
COLUMN = {name: i for i, name in enumerate(COLUMNS)}
