"""Hopper GPC distributed-shared-memory (DSM) fabric.

Models the SM-to-SM network of one GPC as read in seed 000
(``000_8cf2435219a2167b.txt``): per-SM injection shaper, TPC arbiter,
GPCMMU route hash, six-to-four GPCARB ingress, two 6x6 GX switch planes,
GPCARB egress fan-out, request/response virtual channels and coalesced write
acknowledgements.
"""

from .config import DsmConfig

__all__ = ["DsmConfig"]
