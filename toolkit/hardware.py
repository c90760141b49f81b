"""Device ceilings for the roofline figure: measured where we have measured, datasheet leads otherwise.

`crucible calibrate` measures them on the device (toolkit/calibration.py) and they are preferred; the
table below holds what was measured on this project's H200 (copy bandwidth, bf16 matmul) and datasheet leads.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .results import DeviceInfo


class Ceilings(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    memory_bytes_per_s: float
    """Device-memory bandwidth, bytes read + written (a large device-to-device copy)."""
    flops_per_s: dict[str, float]
    """Per dtype: the best arithmetic rate (matrix units for half types)."""
    source: str


KNOWN = {
    "H200": Ceilings(name="NVIDIA H200", memory_bytes_per_s=4.3e12,
                     flops_per_s={"float32": 67e12, "float16": 790e12, "bfloat16": 790e12, "float64": 34e12,
                                  "float8_e4m3fn": 1580e12, "float8_e5m2": 1580e12},
                     source="copy 4.3 TB/s and bf16 matmul 790 TFLOP/s measured on this project's H200 "
                            "(2026-11); fp32/fp64 from the datasheet; fp8 the datasheet's derated as bf16 is"),
    "H100": Ceilings(name="NVIDIA H100", memory_bytes_per_s=3.0e12,
                     flops_per_s={"float32": 67e12, "float16": 750e12, "bfloat16": 750e12, "float64": 34e12,
                                  "float8_e4m3fn": 1500e12, "float8_e5m2": 1500e12},
                     source="datasheet leads, derated"),
}


DATASHEET = {
    # Theoretical peaks (SXM, dense): what no kernel can beat. The physics check compares against these;
    # the roofline compares against the ceilings above, which a well-made kernel may pass by a few percent
    # (e.g. a read stream faster than the copy or the reduction the ceiling was measured with). fp32 allows
    # TF32 tensor cores, which a kernel may use where the task's tolerance admits them.
    "H200": Ceilings(name="NVIDIA H200", memory_bytes_per_s=4.8e12,
                     flops_per_s={"float32": 495e12, "float16": 990e12, "bfloat16": 990e12, "float64": 67e12,
                                  "float8_e4m3fn": 1979e12, "float8_e5m2": 1979e12},
                     source="NVIDIA H200 SXM datasheet"),
    "H100": Ceilings(name="NVIDIA H100", memory_bytes_per_s=3.35e12,
                     flops_per_s={"float32": 495e12, "float16": 990e12, "bfloat16": 990e12, "float64": 67e12,
                                  "float8_e4m3fn": 1979e12, "float8_e5m2": 1979e12},
                     source="NVIDIA H100 SXM datasheet"),
}


def datasheet_for(device: DeviceInfo) -> Ceilings | None:
    """The device's theoretical peaks, when the table knows it."""
    return next((ceil for key, ceil in DATASHEET.items() if key in device.name), None)


def measured_ceilings_path() -> Path:
    from .workspace import cache_root

    return cache_root() / "ceilings.json"


def ceilings_for(device: DeviceInfo) -> Ceilings | None:
    """Measured ceilings (`crucible calibrate`) for this device name, else the built-in table's."""
    known = next((ceil for key, ceil in KNOWN.items() if key in device.name), None)
    path = measured_ceilings_path()
    if path.is_file():
        measured = json.loads(path.read_text())
        if device.name in measured:
            ceil = Ceilings.model_validate(measured[device.name])
            if known is not None:  # rates calibration does not measure (fp8) from the table, not fp32's
                ceil = ceil.model_copy(update={"flops_per_s": {**known.flops_per_s, **ceil.flops_per_s}})
            return ceil
    return known


def limit_seconds(ceil: Ceilings, dtype: str | None, flops: float, nbytes: float) -> float:
    """The time one call takes at these ceilings: its bytes over the bandwidth or its flops over the
    dtype's rate, whichever is longer."""
    rate = ceil.flops_per_s.get(dtype or "float32", ceil.flops_per_s["float32"])
    return max(nbytes / ceil.memory_bytes_per_s, flops / rate)


def peak_fraction(device: DeviceInfo, dtype: str | None, flops: float, nbytes: float,
                  seconds: float, ceil: Ceilings | None = None) -> float | None:
    """Achieved rate over the ceiling (default: the measured or built-in one for the device): the larger of
    the compute and the memory fraction, which is the time at the ceiling over the time taken."""
    ceil = ceil or ceilings_for(device)
    if ceil is None or seconds <= 0:
        return None
    return limit_seconds(ceil, dtype, flops, nbytes) / seconds
