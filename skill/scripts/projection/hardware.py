"""Per-GPU hardware table: dense peak TFLOP/s by precision, HBM, and the two link speeds.

Every number is a vendor datasheet value, or is derived from one by the arithmetic written beside
it; nothing is measured or tuned here (what a GPU *achieves* is fitted in ``calibrate.py``).

Conventions
* Peaks are **dense** Tensor/Matrix-core TFLOP/s. NVIDIA datasheets print Blackwell-era (and the
  H100/A100 "with sparsity") numbers with 2:4 sparsity; those are halved, as their footnotes say.
  Rack and board datasheets (DGX/HGX x8, NVL72 x72) are divided by their GPU count.
* ``hbm_gib``: the datasheet's "GB" of HBM taken as GiB. HBM stacks come in binary sizes (H100 80 GB
  is five 16 GiB stacks; ``nvidia-smi`` shows 81,559 MiB), and the memory verdict keeps a safety
  margin (``memory.py``) that covers the difference either way.
* ``intra_gbs``: scale-up bandwidth per GPU **per direction** in GB/s (NVLink or AMD Infinity
  Fabric): datasheets print the bidirectional total, halved here.
* ``inter_gbs``: scale-out bandwidth per GPU per direction in GB/s, from the reference system's
  NICs (one NIC per GPU in every system below). Datasheets give it in Gb/s; /8.
* ``gpus_per_node``: the scale-up domain, the set of GPUs that reach each other at ``intra_gbs``.
  8 for HGX/DGX/OAM boards. **NVL72 (GB200, GB300)**: the NVLink domain is the whole 72-GPU rack, so
  the default is 72; a communicator whose ranks span at most this many GPUs is treated as NVLink
  (the placement rule in ``model.py`` is by span, not by rack alignment). Pass
  ``gpus_per_node`` to ``project`` for NVL4/NVL8 partitions or a job laid out across racks.
* ``family``: the calibration family whose fitted efficiencies the GPU uses. H200 has the H100's
  compute die and peaks (its datasheet differs only in HBM), so it shares H100's fit; a GPU with no
  usable published row (A100, MI300X, MI325X, MI355X) has its own family, which the fit leaves at
  the cross-GPU values, and ``project`` warns that it is uncalibrated.

Sources (vendor datasheets; values per GPU after the arithmetic above)
* A100: NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB): BF16 312 TFLOPS (624 sparse), HBM2e 80 GB,
  2,039 GB/s, NVLink 600 GB/s. NIC: NVIDIA DGX A100 datasheet, 8x ConnectX-6 HDR 200 Gb/s. No FP8.
* H100: NVIDIA H100 Tensor Core GPU datasheet (SXM): BF16 1,979 / FP8 3,958 TFLOPS "with sparsity",
  80 GB HBM3, 3.35 TB/s, NVLink 900 GB/s. NIC: DGX H100 datasheet, 8x ConnectX-7 400 Gb/s.
* H200: NVIDIA H200 Tensor Core GPU datasheet (SXM): same peaks as H100, 141 GB HBM3e, 4.8 TB/s,
  NVLink 900 GB/s. NIC: DGX H200, 8x ConnectX-7 400 Gb/s.
* B200: NVIDIA HGX B200 / DGX B200 datasheets (8 GPUs): FP4 144, FP8 72, BF16 36 PFLOPS (sparse),
  1,440 GB HBM3e, 64 TB/s, NVLink 14.4 TB/s total (1.8 TB/s per GPU). NIC: 8x ConnectX-7 400 Gb/s.
* B300: NVIDIA HGX B300 (Blackwell Ultra, 8 GPUs): FP8 72 and BF16 36 PFLOPS (sparse), FP4 105 PFLOPS
  dense, "up to 2.3 TB" HBM3e (288 GB per GPU), 8 TB/s per GPU, NVLink 1.8 TB/s per GPU. NIC: 8x
  ConnectX-8 SuperNIC 800 Gb/s.
* GB200: NVIDIA GB200 NVL72 datasheet (72 GPUs): FP4 1,440, FP8 720, BF16 360 PFLOPS (sparse), up to
  13.4 TB HBM3e (186 GB per GPU), 576 TB/s (8 TB/s per GPU), NVLink 130 TB/s (1.8 TB/s per GPU).
  NIC: one ConnectX-7 400 Gb/s per GPU in the compute tray.
* GB300: NVIDIA GB300 NVL72 datasheet (72 GPUs): FP4 1,080 PFLOPS dense, FP8 720 and BF16 360 PFLOPS
  (sparse), up to 21 TB HBM3e (288 GB per GPU), 576 TB/s, NVLink 130 TB/s. NIC: 72x ConnectX-8 800 Gb/s.
* MI300X: AMD Instinct MI300X datasheet: BF16 1,307.4, FP8 2,614.9 TFLOPS (dense), 192 GB HBM3,
  5.3 TB/s, 7 Infinity Fabric links, 896 GB/s peer-to-peer total (448 per direction).
* MI325X: AMD Instinct MI325X datasheet: same peaks and links as MI300X, 256 GB HBM3E, 6 TB/s.
* MI355X: AMD Instinct MI355X datasheet: FP16/BF16 2.5, FP8 5, MXFP4 10 PFLOPS (dense, as printed),
  288 GB HBM3E, 8 TB/s, Infinity Fabric 1,075 GB/s peer-to-peer total (537.5 per direction).
* AMD NICs: AMD does not fix the NIC of an MI300X/MI325X/MI355X system (OEM choice); the value is the
  one-400 Gb/s-NIC-per-GPU layout of AMD's reference 8-GPU platforms (MI355X: Pensando Pollara 400),
  i.e. 50 GB/s. Pass a different ``gpus_per_node`` or edit this table for another fabric.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from attune.core.errors import InputError


@dataclasses.dataclass(frozen=True)
class GPU:
    name: str
    peak_tflops: dict  # precision ("bf16", "fp8", "fp4") -> dense TFLOP/s
    hbm_gib: float
    hbm_tbs: float  # TB/s
    intra_gbs: float  # GB/s per direction, scale-up
    inter_gbs: float  # GB/s per direction, scale-out (per-GPU NIC)
    gpus_per_node: int
    family: str
    source: str
    blackwell: bool = False  # NVIDIA Blackwell (sm_100/sm_103): its attention kernels are not Hopper's

    def peak(self, precision: str) -> float:
        """Dense peak in FLOP/s for a precision; an error naming what this GPU has otherwise."""
        value = self.peak_tflops.get(precision)
        if value is None:
            raise InputError("%s has no %s tensor cores (it has %s)"
                             % (self.name, precision.upper(), ", ".join(sorted(self.peak_tflops))))
        return value * 1e12


def _gpu(name, bf16, fp8, fp4, hbm_gib, hbm_tbs, intra_bidir, nic_gbit, per_node, family, source):
    peaks = {"bf16": bf16}
    if fp8:
        peaks["fp8"] = fp8
    if fp4:
        peaks["fp4"] = fp4
    return GPU(name, peaks, hbm_gib, hbm_tbs, intra_bidir / 2.0, nic_gbit / 8.0, per_node, family, source,
               name in ("B200", "B300", "GB200", "GB300"))


GPUS = {gpu.name: gpu for gpu in (
    _gpu("A100", 312.0, None, None, 80, 2.039, 600, 200, 8, "A100", "A100 datasheet (SXM 80GB); DGX A100"),
    _gpu("H100", 1979 / 2, 3958 / 2, None, 80, 3.35, 900, 400, 8, "H100", "H100 datasheet (SXM); DGX H100"),
    _gpu("H200", 1979 / 2, 3958 / 2, None, 141, 4.8, 900, 400, 8, "H100", "H200 datasheet (SXM); DGX H200"),
    _gpu("B200", 36000 / 8 / 2, 72000 / 8 / 2, 144000 / 8 / 2, 1440 / 8, 64 / 8, 1800, 400, 8, "B200",
         "HGX/DGX B200 datasheets"),
    _gpu("B300", 36000 / 8 / 2, 72000 / 8 / 2, 105000 / 8, 2304 / 8, 8.0, 1800, 800, 8, "B300",
         "HGX B300 (Blackwell Ultra)"),
    _gpu("GB200", 360000 / 72 / 2, 720000 / 72 / 2, 1440000 / 72 / 2, 13400 / 72, 576 / 72, 1800, 400, 72, "GB200",
         "GB200 NVL72 datasheet"),
    _gpu("GB300", 360000 / 72 / 2, 720000 / 72 / 2, 1080000 / 72, 288, 576 / 72, 1800, 800, 72, "GB300",
         "GB300 NVL72 datasheet"),
    _gpu("MI300X", 1307.4, 2614.9, None, 192, 5.3, 896, 400, 8, "MI300X", "AMD Instinct MI300X datasheet"),
    _gpu("MI325X", 1307.4, 2614.9, None, 256, 6.0, 896, 400, 8, "MI325X", "AMD Instinct MI325X datasheet"),
    _gpu("MI355X", 2500.0, 5000.0, 10000.0, 288, 8.0, 1075, 400, 8, "MI355X", "AMD Instinct MI355X datasheet"),
)}

_ALIASES = {"A100-80GB": "A100", "A100-SXM": "A100", "H100-SXM": "H100", "H100-80GB": "H100", "H200-SXM": "H200",
            "DGX-H100": "H100", "DGX-H200": "H200", "DGX-B200": "B200", "DGX-B300": "B300", "DGX-GB200": "GB200",
            "DGX-GB300": "GB300", "GB200-NVL72": "GB200", "GB300-NVL72": "GB300"}


def get(name: Optional[str]) -> GPU:
    """The table entry for a GPU name (case-insensitive; DGX and SXM spellings accepted)."""
    key = str(name or "").strip().upper()
    key = _ALIASES.get(key, key)
    if key not in GPUS:
        raise InputError("unknown hardware %r; known: %s" % (name, ", ".join(GPUS)))
    return GPUS[key]
